"""The public surface is chosen: these names, and nothing else, are exported."""

from __future__ import annotations

import inspect

import headwater
import headwater.errors as errors


def test_package_exports() -> None:
    assert sorted(headwater.__all__) == [
        "BinlogCoordinate",
        "HeadwaterError",
        "MariadbGtid",
        "MariadbGtidPos",
        "MysqlGtid",
        "MysqlGtidSet",
        "Position",
        "__version__",
        "parse_gtid_set",
    ]
    for name in headwater.__all__:
        assert hasattr(headwater, name), name


def test_every_error_class_is_exported_and_derives_from_headwater_error() -> None:
    defined = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and obj.__module__ == errors.__name__
    }
    assert set(errors.__all__) == defined
    for name in defined - {"TransientError"}:
        assert issubclass(getattr(errors, name), errors.HeadwaterError), name


def test_error_tree_is_drawn_in_the_module_docstring() -> None:
    doc = errors.__doc__ or ""
    for name in set(errors.__all__) - {"TransientError"}:
        assert name in doc, f"{name} missing from the tree in errors.py's docstring"


def test_transient_errors_say_so() -> None:
    assert errors.ConnectionLostError("x").retryable is True
    assert not hasattr(errors.PositionPurgedError("x"), "retryable")


def test_wiring_layer_exports() -> None:
    """The pipeline wiring's chosen names (issue 12): sinks build themselves from their
    sections, connections have one type per role, snapshots no longer export the
    pipeline's entry points (headwater.pipeline.snapshots has them)."""
    import headwater.connections as connections
    import headwater.pipeline as pipeline
    import headwater.sinks as sinks
    import headwater.snapshot as snapshot

    assert sorted(pipeline.__all__) == [
        "PipelineConfig",
        "load_pipeline_config",
        "parse_pipeline_config",
    ]
    assert sorted(connections.__all__) == [
        "ServerConnection",
        "SourceConnection",
        "TargetConnection",
        "mysql_connect",
    ]
    assert sorted(sinks.__all__) == [
        "ApplyResult",
        "DdlMode",
        "RetryPolicy",
        "SINKS",
        "SchemaFile",
        "SchemaSource",
        "Sink",
        "SinkCapabilities",
        "SinkContext",
        "SinkFactory",
        "SinkSection",
        "StaticSchema",
        "TargetConnection",
        "create_sink",
        "sink_factory",
    ]
    assert sorted(snapshot.__all__) == [
        "SnapshotMode",
        "SnapshotOptions",
        "SnapshotRequest",
        "SnapshotResult",
        "SnapshotRunner",
        "plan_snapshot",
        "watch_signals",
    ]
    for module in (pipeline, connections, sinks, snapshot):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
