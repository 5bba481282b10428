"""The pipeline definition: validation errors name the key; checkpoint ownership (no Spark)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from sparkonce.errors import CheckpointError, PipelineConfigError
from sparkonce.pipeline.loader import load_pipeline, parse_pipeline
from sparkonce.pipeline.model import Trigger
from sparkonce.pipeline.owner import OWNER_FILE, claim_checkpoint, read_owner
from sparkonce_local.demo_pipeline import quickstart_pipeline

VALID = quickstart_pipeline("127.0.0.1:9092")


def _parse(text: str, tmp_path: Path) -> object:
    return parse_pipeline(text, tmp_path / "p.toml")


def test_quickstart_pipeline_is_valid(tmp_path: Path) -> None:
    config = parse_pipeline(VALID, tmp_path / "p.toml")
    assert [s.name for s in config.stages] == ["raw", "bronze", "gold"]
    assert config.raw.table == str(tmp_path / "tables" / "raw")
    assert config.raw.trigger == Trigger("availableNow")
    assert config.bronze is not None and [f.name for f in config.bronze.fields] == [
        "device_id",
        "reading_time",
        "value",
    ]
    assert config.gold is not None and config.gold.keys == ("device_id",) and config.gold.order_by == ("reading_time",)
    assert config.source.spark_options()["maxOffsetsPerTrigger"] == "500"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'checkpoint = "checkpoints/bronze"',
            'checkpoint = "checkpoints/raw"',
            "stages.bronze.checkpoint: shared with stages.raw.checkpoint",
        ),
        (
            'quarantine = "tables/quarantine"',
            'quarantine = "tables/bronze"',
            "stages.bronze.quarantine: same path as stages.bronze.table",
        ),
        ('checkpoint = "checkpoints/gold"', 'checkpoint = "checkpoints/raw/gold"', "stages.gold.checkpoint"),
        ('drift = "fail"', 'drift = "evolve"', "stages.bronze.drift: 'evolve' is not a drift policy"),
        ('keys = ["device_id"]', 'keys = ["sensor"]', "stages.gold.keys: 'sensor' is not a bronze column"),
        ('merge = "latest"', 'merge = "sum"', "stages.gold.merge"),
        (
            "max_offsets_per_trigger = 500",
            "max_offsets_per_trigger = -1",
            "source.max_offsets_per_trigger: must be a positive",
        ),
        ("max_offsets_per_trigger = 500", "max_offset_per_trigger = 5", "source.max_offset_per_trigger: unknown key"),
        ('starting_offsets = "earliest"', 'starting_offsets = "first"', "source.starting_offsets"),
        (
            'schema = "device_id STRING, reading_time TIMESTAMP, value DOUBLE"',
            'schema = "device_id STRING, value DUBBLE"',
            "stages.bronze.schema: field 'value'",
        ),
        (
            'schema = "device_id STRING, reading_time TIMESTAMP, value DOUBLE"',
            'schema = "device_id STRING, _offset BIGINT"',
            "reserved",
        ),
        (
            'required = ["device_id", "reading_time", "value"]',
            'required = ["device_id", "humidity"]',
            "stages.bronze.required: 'humidity'",
        ),
        (
            'required = ["device_id", "reading_time", "value"]',
            'required = ["value"]',
            "stages.gold.keys: 'device_id' must be listed in stages.bronze.required",
        ),
        (
            "trigger = { availableNow = true }",
            'trigger = { processingTime = "soon" }',
            "stages.raw.trigger.processingTime",
        ),
        ("trigger = { availableNow = true }", "trigger = { once = true }", "stages.raw.trigger.once: unknown trigger"),
        ('topic = "sensor_readings_raw"', "topic = 42", "source.topic: must be a non-empty string"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in VALID
    with pytest.raises(PipelineConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        _parse(VALID.replace(old, new, 1), tmp_path)


def test_missing_sections(tmp_path: Path) -> None:
    with pytest.raises(PipelineConfigError, match=r"^source: missing"):
        _parse('[stages.raw]\ntable = "t"\ncheckpoint = "c"\n', tmp_path)
    with pytest.raises(PipelineConfigError, match=r"^stages: defines no stage"):
        _parse('[source]\nbootstrap_servers = "b"\ntopic = "t"\n[stages]\n', tmp_path)
    with pytest.raises(PipelineConfigError, match="not valid TOML"):
        _parse("[source\n", tmp_path)
    with pytest.raises(PipelineConfigError, match="pipeline file not found"):
        load_pipeline(tmp_path / "nope.toml")


def test_default_trigger_is_five_seconds(tmp_path: Path) -> None:
    text = '[source]\nbootstrap_servers = "b"\ntopic = "t"\n[stages.raw]\ntable = "t"\ncheckpoint = "c"\n'
    config = parse_pipeline(text, tmp_path / "p.toml")
    assert config.raw.trigger.spark_kwargs() == {"processingTime": "5 seconds"}


def _write(tmp_path: Path, name: str, text: str = VALID) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_checkpoint_claimed_and_reclaimed(tmp_path: Path) -> None:
    config = load_pipeline(_write(tmp_path, "p.toml"))
    owner = claim_checkpoint(config.path, "raw", config.raw.checkpoint)
    assert owner == read_owner(config.raw.checkpoint)
    assert claim_checkpoint(config.path, "raw", config.raw.checkpoint) == owner


def test_checkpoint_shared_by_two_pipeline_files_is_refused(tmp_path: Path) -> None:
    first = load_pipeline(_write(tmp_path, "first.toml"))
    second = load_pipeline(_write(tmp_path, "second.toml"))
    claim_checkpoint(first.path, "raw", first.raw.checkpoint)
    with pytest.raises(CheckpointError, match=r"belongs to stage 'raw' of pipeline .*first\.toml.*refusing to share"):
        claim_checkpoint(second.path, "raw", second.raw.checkpoint)


def test_checkpoint_of_another_stage_is_refused(tmp_path: Path) -> None:
    config = load_pipeline(_write(tmp_path, "p.toml"))
    claim_checkpoint(config.path, "raw", config.raw.checkpoint)
    with pytest.raises(CheckpointError, match="belongs to stage 'raw'"):
        claim_checkpoint(config.path, "bronze", config.raw.checkpoint)


def test_moved_checkpoint_is_noticed(tmp_path: Path) -> None:
    config = load_pipeline(_write(tmp_path, "p.toml"))
    claim_checkpoint(config.path, "raw", config.raw.checkpoint)
    (Path(config.raw.checkpoint) / "offsets").mkdir()
    moved = tmp_path / "elsewhere" / "raw"
    moved.parent.mkdir()
    shutil.move(config.raw.checkpoint, moved)
    with pytest.raises(CheckpointError, match=r"was created at .* has been moved"):
        claim_checkpoint(config.path, "raw", str(moved))


def test_foreign_spark_checkpoint_is_refused(tmp_path: Path) -> None:
    config = load_pipeline(_write(tmp_path, "p.toml"))
    ck = Path(config.raw.checkpoint)
    ck.mkdir(parents=True)
    (ck / "metadata").write_text(json.dumps({"id": "q"}))
    with pytest.raises(CheckpointError, match=f"no {OWNER_FILE}"):
        claim_checkpoint(config.path, "raw", str(ck))


SOURCE_TOML = '[source]\nbootstrap_servers = "b"\ntopic = "t"\n'


def _stage(name: str, input_name: str, table: str, extra: str = 'sql = "SELECT * FROM {input}"') -> str:
    return f'[stages.{name}]\ninput = "{input_name}"\ntable = "tables/{table}"\ncheckpoint = "ck/{name}"\n{extra}\n'


def test_stages_in_a_dag_are_ordered_upstream_first(tmp_path: Path) -> None:
    text = SOURCE_TOML + _stage("d", "b", "d") + _stage("b", "a", "b") + _stage("a", "source", "a")
    text += _stage("c", "a", "c")
    config = parse_pipeline(text, tmp_path / "p.toml")
    assert [s.name for s in config.stages] == ["a", "b", "c", "d"]
    assert config.downstream("a") == ("b", "c", "d")
    assert config.downstream("b") == ("d",)
    assert config.downstream("d") == ()
    assert config.input_table(config.stage("d")) == str(tmp_path / "tables" / "b")
    assert config.input_table(config.stage("a")) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SOURCE_TOML + _stage("a", "nowhere", "a"), "stages.a.input: 'nowhere' is not a stage of this pipeline"),
        (SOURCE_TOML + _stage("a", "b", "a") + _stage("b", "a", "b"), "stages: the stages a -> b read one another"),
        (SOURCE_TOML + _stage("a", "a", "a"), "stages.a.input: a stage cannot read its own table"),
        (SOURCE_TOML + _stage("a", "source", "x") + _stage("b", "a", "x"), "stages.b.table: same path as stages.a"),
        (
            SOURCE_TOML + _stage("a", "source", "x", 'sql = "SELECT 1"\ntransform = "m:f"'),
            "stages.a: give exactly one of transform",
        ),
        (SOURCE_TOML + _stage("a", "source", "x", 'sql = "SELECT 1"'), "stages.a.sql: the SQL must read"),
        (SOURCE_TOML + _stage("a", "source", "x", 'sql = "missing.sql"'), "stages.a.sql: cannot read the SQL file"),
        (SOURCE_TOML + _stage("a", "source", "x", 'kind = "sink"\nsql = "x"'), "stages.a.kind: 'sink' is not"),
        (
            SOURCE_TOML
            + '[stages.a]\ninput = "source"\ncheckpoint = "ck/a"\nsql = "SELECT * FROM {input}"\n'
            + 'tables = ["t/x", { path = "u/x" }]\n',
            "stages.a.tables[1].name: 'x' names two tables",
        ),
        (
            SOURCE_TOML + '[stages.p]\nkind = "postgres"\ninput = "source"\ntable = "t"\ncheckpoint = "ck/p"\n',
            "stages.p: give exactly one of dsn",
        ),
        (
            SOURCE_TOML
            + '[stages.p]\nkind = "postgres"\ninput = "source"\ntable = "t; drop"\ndsn = "postgresql://h/db"\n'
            + 'checkpoint = "ck/p"\n',
            "stages.p.table: ",
        ),
        (
            SOURCE_TOML
            + '[stages.p]\nkind = "postgres"\ninput = "source"\ntable = "t"\ndsn = "postgresql://h/db"\n'
            + 'checkpoint = "ck/p"\n'
            + _stage("a", "p", "a"),
            "stages.a.input: stage 'p' writes PostgreSQL",
        ),
        (
            SOURCE_TOML
            + _stage("a", "source", "a")
            + '[stages.m]\nkind = "merge"\ninput = "a"\ntable = "tables/m"\ncheckpoint = "ck/m"\nkeys = ["id"]\n'
            + 'order_by = "seq"\ndelete = "source.op = \'D\'"\n',
            'stages.m.delete: SQL clauses go with merge = "clauses"',
        ),
        (
            SOURCE_TOML
            + _stage("a", "source", "a")
            + '[stages.m]\nkind = "merge"\ninput = "a"\ntable = "tables/m"\ncheckpoint = "ck/m"\nkeys = ["id"]\n'
            + 'order_by = "seq"\npartition_by = ["site"]\n',
            'stages.m.partition_by: a partitioned merge target goes with merge = "clauses"',
        ),
        (
            SOURCE_TOML
            + _stage("a", "source", "a")
            + '[stages.m]\nkind = "merge"\ninput = "a"\ntable = "tables/m"\ncheckpoint = "ck/m"\nkeys = ["id"]\n'
            + 'order_by = "seq"\nmerge = "clauses"\n',
            'stages.m: merge = "clauses" needs at least one of delete, update, insert',
        ),
    ],
    ids=[
        "unknown-input",
        "cycle",
        "self-input",
        "two-stages-one-table",
        "sql-and-transform",
        "sql-no-input",
        "sql-file-missing",
        "unknown-kind",
        "fan-out-name-clash",
        "postgres-no-dsn",
        "postgres-bad-table",
        "reads-postgres",
        "clause-without-clauses-rule",
        "partitioned-latest",
        "clauses-none",
    ],
)
def test_graph_and_stage_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(PipelineConfigError, match=re.escape(message)):
        config = parse_pipeline(text, tmp_path / "p.toml")
        for stage in config.stages:  # the SQL check needs no Spark
            transform = getattr(stage, "transform", None)
            if transform is not None:
                transform.resolve()


@pytest.mark.parametrize(
    ("module", "spec", "message"),
    [
        ("", "nosuchmodule_xyz:f", "module 'nosuchmodule_xyz' not found"),
        ("import nosuchdependency_xyz\n", "broken_dep:f", "importing module 'broken_dep' failed"),
        ("f = 3\n", "notcallable:f", "'notcallable:f' is a int, not a callable"),
        ("def g(df): return df\n", "noattr:f", "module 'noattr' has no 'f'"),
        ("def f(a, b, c): return a\n", "threeargs:f", "a transform takes (df) or (df, batch_id)"),
        ("def f(df, *, mode): return df\n", "kwonly:f", "a transform takes (df) or (df, batch_id)"),
        ("def f(df): return df\n", "nocolon", "'nocolon' is not 'module:function'"),
    ],
    ids=["not-found", "import-fails", "not-callable", "no-attribute", "three-args", "keyword-only", "no-colon"],
)
def test_transform_load_errors(tmp_path: Path, module: str, spec: str, message: str) -> None:
    name = spec.partition(":")[0]
    if module:
        (tmp_path / f"{name}.py").write_text(module)
    text = SOURCE_TOML + _stage("a", "source", "x", f'transform = "{spec}"')
    config = parse_pipeline(text, tmp_path / "p.toml")
    stage = config.stage("a")
    with pytest.raises(PipelineConfigError, match=re.escape(message)) as info:
        stage.transform.resolve()  # type: ignore[union-attr]
    assert str(info.value).startswith("stages.a.transform: ")


def test_transform_styles_resolve(tmp_path: Path) -> None:
    (tmp_path / "styles_mod.py").write_text(
        "def one(df): return df\ndef two(df, batch_id): return df\ndef opt(df, batch_id=None): return df\n"
    )
    (tmp_path / "q.sql").write_text("SELECT value FROM {input};\n")
    styles = {}
    for function in ("one", "two", "opt"):
        text = SOURCE_TOML + _stage("a", "source", "x", f'transform = "styles_mod:{function}"')
        stage = parse_pipeline(text, tmp_path / "p.toml").stage("a")
        styles[function] = stage.transform.resolve().style  # type: ignore[union-attr]
    assert styles == {"one": "batch", "two": "batch_and_id", "opt": "batch"}
    stage = parse_pipeline(SOURCE_TOML + _stage("a", "source", "x", 'sql = "q.sql"'), tmp_path / "p.toml").stage("a")
    assert stage.transform.sql == "SELECT value FROM {input}"  # type: ignore[union-attr]


def test_postgres_stage_dsn_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = SOURCE_TOML + (
        '[stages.p]\nkind = "postgres"\ninput = "source"\ntable = "analytics.t"\ndsn_env = "PIPE_TEST_DSN"\n'
        'keys = ["id"]\ncheckpoint = "ck/p"\nsql = "SELECT key AS id FROM {input}"\n'
    )
    stage = parse_pipeline(text, tmp_path / "p.toml").stage("p")
    monkeypatch.delenv("PIPE_TEST_DSN", raising=False)
    with pytest.raises(
        PipelineConfigError, match=re.escape("stages.p.dsn_env: the environment variable PIPE_TEST_DSN is not set")
    ):
        stage.resolved_dsn()  # type: ignore[union-attr]
    monkeypatch.setenv("PIPE_TEST_DSN", "postgresql://app@db:5432/x")
    assert stage.resolved_dsn() == "postgresql://app@db:5432/x"  # type: ignore[union-attr]
    assert stage.tables == () and stage.keys == ("id",)
    assert stage.commit_protocol == "staging"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('commit_protocol = "xa"\n', "stages.p.commit_protocol: 'xa' must be one of ['staging', 'two-phase']"),
        ('commit_protocol = "two-phase"\nkeys = ["id"]\n', "stages.p.commit_protocol: two-phase commits appends only"),
    ],
)
def test_postgres_stage_commit_protocol(tmp_path: Path, extra: str, message: str) -> None:
    base = SOURCE_TOML + '[stages.p]\nkind = "postgres"\ninput = "source"\ntable = "t"\ndsn = "postgresql://a@h/x"\n'
    base += 'checkpoint = "ck/p"\n'
    stage = parse_pipeline(base + 'commit_protocol = "two-phase"\n', tmp_path / "p.toml").stage("p")
    assert stage.commit_protocol == "two-phase"  # type: ignore[union-attr]
    with pytest.raises(PipelineConfigError, match=re.escape(message)):
        parse_pipeline(base + extra, tmp_path / "p.toml")


STORAGE = """
[storage]
AWS_ENDPOINT_URL = "http://127.0.0.1:8333"
AWS_ALLOW_HTTP = true
conditional_put = "etag"

[storage_env]
AWS_SECRET_ACCESS_KEY = "SPARKONCE_TEST_SECRET"
"""


def test_storage_tables_give_every_table_its_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = quickstart_pipeline("127.0.0.1:9092").replace('"tables/', '"s3://lake/') + STORAGE
    config = parse_pipeline(text, tmp_path / "p.toml")
    assert config.raw.table == "s3://lake/raw"
    monkeypatch.setenv("SPARKONCE_TEST_SECRET", "s3cret")
    assert config.storage_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag",
        "AWS_SECRET_ACCESS_KEY": "s3cret",
    }
    monkeypatch.delenv("SPARKONCE_TEST_SECRET")
    with pytest.raises(
        PipelineConfigError,
        match=r"storage_env.AWS_SECRET_ACCESS_KEY: the environment variable "
        r"SPARKONCE_TEST_SECRET is not set .* in .*p\.toml",
    ):
        config.storage_options()


@pytest.mark.parametrize(
    ("storage", "message"),
    [
        ('[storage]\nAWS_REGION = ["a"]\n', r"storage.AWS_REGION: must be a string"),
        ('[storage]\n"AWS REGION" = "x"\n', r"storage.AWS REGION: is not a storage option name"),
        ('storage = "x"\n', r"storage: must be a table"),
        ('[storage_env]\nAWS_REGION = "not a name"\n', r"storage_env.AWS_REGION: 'not a name' is not an environment"),
        ('[storage]\nAWS_REGION = "x"\n[storage_env]\naws_region = "R"\n', r"storage_env.aws_region: is also set"),
    ],
)
def test_bad_storage_entries_name_the_key_and_the_file(tmp_path: Path, storage: str, message: str) -> None:
    with pytest.raises(PipelineConfigError, match=message + r".*\(in .*p\.toml\)"):
        text = VALID + storage if storage.startswith("[") else storage + VALID  # TOML: a table runs to the next
        parse_pipeline(text, tmp_path / "p.toml")


def test_tables_named_as_in_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkonce.delta.table.catalog import WAREHOUSE_ENV, CatalogTable, DeltaCatalog

    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)
    warehouse = tmp_path / "spark-warehouse"
    external = tmp_path / "elsewhere" / "bronze"
    DeltaCatalog(str(warehouse)).add("lake", "bronze", str(external), managed=False)
    text = (
        VALID.replace('table = "tables/raw"', 'table_name = "lake.raw"')
        .replace('table = "tables/bronze"', 'table_name = "LAKE.Bronze"')
        .replace('quarantine = "tables/quarantine"', 'quarantine_name = "bad_rows"')
    )
    config = parse_pipeline(text, tmp_path / "p.toml")
    assert config.raw.table == str(warehouse / "lake.db" / "raw")  # not registered yet: managed, to be registered
    assert config.bronze is not None and config.bronze.table == str(external)  # registered: its location
    assert config.bronze.quarantine == str(warehouse / "bad_rows")  # database "default": the warehouse itself
    assert config.gold is not None and config.gold.table == str(tmp_path / "tables" / "gold")  # a path, as before
    assert config.warehouse == str(warehouse)
    assert sorted(config.named_tables, key=lambda t: t.name) == [
        CatalogTable("default", "bad_rows", str(warehouse / "bad_rows"), managed=True),
        CatalogTable("lake", "bronze", str(external), managed=False),
        CatalogTable("lake", "raw", str(warehouse / "lake.db" / "raw"), managed=True),
    ]
    assert parse_pipeline(VALID, tmp_path / "p.toml").warehouse is None  # no name: no catalog

    other = parse_pipeline('warehouse = "wh"\n' + text, tmp_path / "p.toml")
    assert other.raw.table == str(tmp_path / "wh" / "lake.db" / "raw")
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path / "env-wh"))
    assert parse_pipeline(text, tmp_path / "p.toml").raw.table == str(tmp_path / "env-wh" / "lake.db" / "raw")


@pytest.mark.parametrize(
    ("table", "gold", "message"),
    [
        ('table = "tables/raw"\ntable_name = "raw"', None, "stages.raw.table_name: give one of table (a path) and"),
        ('table_name = "a.b.c"', None, "stages.raw.table_name: 'a.b.c' is not a table name"),
        ('table_name = "bad-name"', None, "stages.raw.table_name: 'bad-name' is not a table name"),
        ("table_name = 3", None, "stages.raw.table_name: must be"),
        ('table_name = "raw"', 'table_name = "default.RAW"', "stages.gold.table: same path as stages.raw.table"),
    ],
    ids=["both", "three-parts", "bad-character", "not-text", "same-table"],
)
def test_bad_table_names_are_refused_naming_the_key(tmp_path: Path, table: str, gold: str | None, message: str) -> None:
    text = VALID.replace('table = "tables/raw"', table, 1)
    if gold is not None:
        text = text.replace('table = "tables/gold"', gold, 1)
    with pytest.raises(PipelineConfigError, match=re.escape(message)):
        parse_pipeline(text, tmp_path / "p.toml")
