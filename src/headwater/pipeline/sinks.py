"""Building a pipeline's sinks from its configuration.

Each ``sinks[i]`` section goes to the folder its ``type`` names in the registry
(:data:`headwater.sinks.SINKS`), which parses and validates it
(:mod:`headwater.sinks.section`) against a :class:`~headwater.sinks.section.SinkContext`:
the pipeline's name, the directory of its file, the reader task's ``schema.jsonl`` (or,
for a ``server:`` source, the history from the reader's API) and the view of table
definitions through the pipeline's transforms
(:class:`~headwater.spark.transforms.TransformedSchema`). Nothing here knows a kind of
sink by name. Every error is a :class:`~headwater.errors.ConfigError` naming the pipeline
file, the line and the dotted field.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from headwater.errors import ConfigError
from headwater.pipeline.config import PipelineConfig
from headwater.sinks import SINKS, SchemaSource, SinkContext, SinkSection
from headwater.spark.transforms import TransformedSchema, TransformSpec

__all__ = ["build_sink", "sink_context"]


def _view(specs: tuple[TransformSpec, ...], schema: SchemaSource) -> SchemaSource:
    return TransformedSchema(schema, specs)


def sink_context(pipeline: PipelineConfig) -> SinkContext:
    """What the sink sections of ``pipeline`` are parsed against. A ``server:`` source's
    sinks get their table definitions from the reader's API
    (:class:`~headwater.pipeline.readerschema.ReaderSchema`): no executor has the task's
    schema.jsonl."""
    schema: SchemaSource | None = None
    options = pipeline.source.option_map()
    if pipeline.source.schema_file is None and "server" in options:
        from headwater.pipeline.readerschema import ReaderSchema
        from headwater.spark.offsets import parse_options

        parsed = parse_options(options)  # the token, read here on the driver
        assert parsed.server is not None
        schema = ReaderSchema(parsed.server, parsed.task, parsed.token)
    return SinkContext(
        pipeline=pipeline.name,
        base_dir=Path(pipeline.file).resolve().parent,
        schema_file=pipeline.source.schema_file,
        schema=schema,
        view=partial(_view, pipeline.transforms),
    )


def build_sink(section: SinkSection, pipeline: PipelineConfig) -> Any:
    """The sink object for one ``sinks[i]`` entry (raises ConfigError naming it)."""
    factory = SINKS.get(section.type)
    if factory is None:
        raise ConfigError(
            f"unknown sink type {section.type!r}; expected one of {', '.join(sorted(SINKS))}",
            file=pipeline.file,
            line=section.line,
            field=f"{section.path}.type",
        )
    try:
        return factory.build(section, sink_context(pipeline))
    except ConfigError as e:
        if e.file is not None:
            raise
        raise ConfigError(
            str(e)
            .removeprefix(f"{e.line}: " if e.line else "")
            .removeprefix(f"{e.field}: " if e.field else ""),
            file=pipeline.file,
            line=e.line or section.line,
            field=e.field or section.path,
        ) from None
