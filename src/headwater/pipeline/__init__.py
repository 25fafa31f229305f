"""The wiring of a pipeline: the only package that puts source, transforms, sinks and
snapshots together (docs/architecture.md).

* :mod:`~headwater.pipeline.config`: the pipeline file, loaded into frozen dataclasses
  (sink sections stay raw: each sink folder parses its own);
* :mod:`~headwater.pipeline.sinks`: building the sinks from their sections;
* :mod:`~headwater.pipeline.runner`: the streaming query, its loop, progress lines and
  re-snapshots on signal;
* :mod:`~headwater.pipeline.snapshots`: a snapshot into the pipeline's sinks, and the
  configuration that streams on after it.
"""

from __future__ import annotations

from headwater.pipeline.config import PipelineConfig, load_pipeline_config, parse_pipeline_config

__all__ = ["PipelineConfig", "load_pipeline_config", "parse_pipeline_config"]
