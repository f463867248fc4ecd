"""The launch's settings object (``launch/settings.py``): one entry per ``QUOTECITE_*`` variable, typed validators,
every problem at once, templates, the hand-off to the next job, the tables and the command line. No Slurm needed."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import InputError
from launch import settings
from launch.settings import (
    BY_NAME,
    GROUPS,
    READERS,
    SETTINGS,
    Models,
    Settings,
    SettingsError,
    render_help,
    render_markdown,
    render_resolved,
    resolve,
)

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

SCANNED = ["launch", "slurm", "eval", ".ci", "reward", "data_prep", "quotecite", "recipes", "benchmarks", "tests"]
"""Where the ``QUOTECITE_*`` names are read or set: the launch and its shell scripts, CI, every stage, the recipes,
the benchmarks and the tests (conftest files, stand-ins and support code set and read some)."""
NOT_SCANNED = {Path("launch/settings.py"), Path("tests/launch/test_settings.py")}
"""The table itself and this file (which uses misspelt names on purpose)."""
NAME = re.compile(r"QUOTECITE_[A-Z0-9_]+")


def scanned_files() -> list[Path]:
    out = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            rel = path.relative_to(REPO)
            if path.is_file() and "__pycache__" not in rel.parts and rel not in NOT_SCANNED:
                out.append(path)
    return out


def names_in_use() -> dict[str, list[str]]:
    """Every ``QUOTECITE_*`` name (not a prefix such as ``QUOTECITE_PREP_``) -> where it occurs (``file:line``)."""
    where: dict[str, list[str]] = {}
    for path in scanned_files():
        try:
            body = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for lineno, line in enumerate(body.splitlines(), 1):
            for name in NAME.findall(line):
                where.setdefault(name, []).append(f"{path.relative_to(REPO)}:{lineno}")
    return where


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUOTECITE_")}
    env.update(extra)
    return env


def problems(env: dict[str, str], repo: Path = REPO, readers: set[str] | None = None, **layers) -> list[str]:
    with pytest.raises(SettingsError) as e:
        resolve(env, repo, readers, **layers)
    return e.value.problems


# ------------------------------------------------------------------------------------------------ inventory
def test_every_name_used_in_the_repository_is_a_setting():
    used = names_in_use()
    names = {n for n in used if not n.endswith("_")}
    missing = sorted(names - set(BY_NAME))
    assert not missing, "QUOTECITE_* names used but not in launch.settings.SETTINGS:\n" + "\n".join(
        f"{n} ({', '.join(used[n][:3])})" for n in missing
    )
    # a prefix (``startswith(("QUOTECITE_PREP_", ...))``) stands for settings that exist
    for prefix in (n for n in used if n.endswith("_") and n != "QUOTECITE_"):
        assert any(s.name.startswith(prefix) for s in SETTINGS), f"{prefix} ({used[prefix][0]}) names no setting"
    assert len(names) >= 90  # the scan itself works: the launch, the stages and the tests use about a hundred


def _short_name_uses() -> set[str]:
    """Short names read as attributes (``s.servers.health_timeout``) in launch modules that import the settings."""
    out: set[str] = set()
    for path in sorted((REPO / "launch").glob("*.py")):
        if path.relative_to(REPO) in NOT_SCANNED:
            continue
        body = path.read_text(encoding="utf-8")
        if re.search(r"from launch import [^\n]*\bsettings\b|launch\.settings", body):
            out |= set(re.findall(r"\.([a-z][a-z0-9_]*)\b", body))
    return out


def test_every_setting_is_used_somewhere():
    used = set(names_in_use())
    attrs = _short_name_uses()
    unused = [s.name for s in SETTINGS if s.name not in used and s.short not in attrs]
    assert not unused, f"settings that nothing reads or sets any more (remove them from SETTINGS): {unused}"


def test_the_scan_sees_shell_python_and_yaml():
    used = names_in_use()
    assert any(w.startswith("launch/grpo_8b.sh:") for w in used["QUOTECITE_PYTHON"])
    assert any(w.startswith("recipes/") for w in used["QUOTECITE_CKPT_DIR"])
    assert any(w.startswith("tests/standins/") for w in used["QUOTECITE_STANDIN_STEP_SECONDS"])
    assert any(w.startswith(".ci/") for w in used["QUOTECITE_SLURM_LAYOUT"])


def test_the_table_is_well_formed():
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)
    methods = {m for m in dir(Settings) if not m.startswith("__")}
    for s in SETTINGS:
        assert re.fullmatch(r"QUOTECITE_[A-Z0-9_]*[A-Z0-9]", s.name), s.name
        assert s.group in GROUPS, s.name
        assert s.reader_set <= set(READERS) and s.reader_set, s.name
        assert s.help and "\n" not in s.help and len(s.help) <= 110, s.name
        assert s.short not in methods, f"{s.name}: s.{s.short} would be a method of Settings"
        for ref in s.refers_to:  # resolve() fills in the defaults in one pass, in table order
            assert SETTINGS.index(BY_NAME[ref]) < SETTINGS.index(s), f"{s.name}'s default names {ref}, not one above"
        assert s.group != "test" or s.readers == "test", s.name
    # every group holds something; the test-only settings are read only by tests
    assert {s.group for s in SETTINGS} == set(GROUPS)


# ------------------------------------------------------------------------------------------------ defaults
def test_every_default_parses_with_its_own_validator(tmp_path):
    # DATA_DIR set so that the defaults built from it are filled in too
    s = resolve({"QUOTECITE_DATA_DIR": str(tmp_path / "data")}, tmp_path)
    for setting in SETTINGS:
        if setting.name == "QUOTECITE_DATA_DIR":
            continue
        assert s.source(setting.name) == "default"
        value = getattr(getattr(s, setting.group), setting.short)
        if setting.default is None:
            assert value is None and s.text(setting.name) is None
            continue
        text = s.text(setting.name)
        assert text is not None and "{" not in text, setting.name
        assert setting.parse(text) == value, setting.name


def test_the_shared_defaults_are_typed(tmp_path):
    s = resolve({}, tmp_path)
    assert s.servers.health_timeout == 1800.0 and isinstance(s.servers.health_timeout, float)
    assert (s.servers.judge_port, s.servers.embed_port, s.ray.ray_port) == (8000, 8001, 6379)
    assert (s.servers.judge_gpu_util, s.servers.embed_gpu_util) == (0.55, 0.25)
    assert (s.servers.judge_max_model_len, s.servers.embed_max_model_len) == (32768, 8192)
    assert (s.models.judge_model, s.models.embed_model) == ("Qwen/Qwen3.5-9B", "Qwen/Qwen3-VL-Embedding-2B")
    assert (s.chain.chain, s.run.preflight, s.software.env_setup, s.run.allow_recipe_change) == (
        True,
        True,
        True,
        False,
    )
    assert (s.run.max_restarts, s.servers.max_server_restarts, s.chain.max_stalled_jobs) == (3, 5, 3)
    assert (s.run.stop_grace, s.run.poll_seconds, s.run.trainer_stop) == (3000.0, 5.0, "checkpoint")
    assert (s.layout.serve_gpus, s.layout.judge_replicas, s.layout.train_gpus_per_node, s.run.max_steps) == (
        1,
        1,
        None,
        None,
    )
    assert (
        s.software.flash_attn == "flash-attn==2.8.3"
        and s.software.easyr1_commit == "b44b311"
        and s.software.vllm_server == "0.32.0"
    )
    assert s.source("QUOTECITE_HEALTH_TIMEOUT") == s.source("health_timeout") == "default"


def test_the_model_ids_agree_with_the_stages_that_cannot_import_the_launch():
    from data_prep.encoders.qwen3vl import DEFAULT_MODEL
    from recipes.reader import load_recipe
    from reward.config import DEFAULT_JUDGE_MODEL

    assert Models().judge_model == DEFAULT_JUDGE_MODEL and Models().embed_model == DEFAULT_MODEL
    recipe = (REPO / "recipes" / "qwen3vl_8b_grpo.yaml").read_text()
    assert f"${{oc.env:QUOTECITE_JUDGE_MODEL,{DEFAULT_JUDGE_MODEL}}}" in recipe
    assert callable(load_recipe)


LITERAL_DEFAULT = [
    re.compile(r"\$\{(QUOTECITE_[A-Z0-9_]+):?-([^}$`(]*)\}"),  # bash ${QUOTECITE_X:-default}
    re.compile(r"environ\.get\(\"(QUOTECITE_[A-Z0-9_]+)\", \"([^\"]*)\"\)"),  # python os.environ.get("X", "d")
    re.compile(r"oc\.env:(QUOTECITE_[A-Z0-9_]+),([^}]*)\}"),  # recipe ${oc.env:X,default}
]
KNOWN_OTHER_DEFAULTS = {
    ("QUOTECITE_SLURM_TEST_TIMEOUT", "900"),  # the prep-array benchmark waits longer than a test
    ("QUOTECITE_PYTHON", ".venv/bin/python"),  # the job script's, relative to the repository it cd's to
}


def test_literal_defaults_left_in_scripts_agree_with_the_table():
    """Until every script reads launch.settings, a default still written in one must be the table's."""
    bad = []
    for path in scanned_files():
        try:
            body = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for lineno, line in enumerate(body.splitlines(), 1):
            for pattern in LITERAL_DEFAULT:
                for name, literal in pattern.findall(line):
                    if name not in BY_NAME or not literal or (name, literal) in KNOWN_OTHER_DEFAULTS:
                        continue  # ${X:-} and get("X", "") are "unset", not a default
                    want = BY_NAME[name].default
                    if literal != want and not (want and "{" in want):
                        bad.append(f"{path.relative_to(REPO)}:{lineno}: {name} defaults to {literal!r}, "
                                   f"launch.settings says {want!r}")  # fmt: skip
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------------------------------------ bad values
BAD = [
    ("QUOTECITE_MAX_STEPS", "abc"),
    ("QUOTECITE_MAX_STEPS", "-3"),
    ("QUOTECITE_MAX_STEPS", "0"),
    ("QUOTECITE_MAX_STEPS", "2.5"),
    ("QUOTECITE_MAX_STEPS", "9" * 400),
    ("QUOTECITE_HEALTH_TIMEOUT", "soon"),
    ("QUOTECITE_HEALTH_TIMEOUT", "nan"),
    ("QUOTECITE_HEALTH_TIMEOUT", "1e400"),
    ("QUOTECITE_HEALTH_TIMEOUT", "-inf"),
    ("QUOTECITE_HEALTH_TIMEOUT", "-5"),
    ("QUOTECITE_STOP_GRACE", "1" * 400),
    ("QUOTECITE_JUDGE_PORT", "70000"),
    ("QUOTECITE_EMBED_PORT", "-1"),
    ("QUOTECITE_RAY_PORT", "http"),
    ("QUOTECITE_JUDGE_GPU_UTIL", "1.5"),
    ("QUOTECITE_EMBED_GPU_UTIL", "0"),
    ("QUOTECITE_CHAIN", "yes"),
    ("QUOTECITE_TRAINER_STOP", "never"),
    ("QUOTECITE_JUDGE_URL", "ftp://judge/v1"),
    ("QUOTECITE_JUDGE_URL", "http://a:8000/v1,,http://b:8000/v1"),
    ("QUOTECITE_EMBED_URL", "http://host:99999/v1"),
    ("QUOTECITE_JUDGE_ARGS", '--chat-template "x'),
    ("QUOTECITE_JUDGE_CMD", "   "),
    ("QUOTECITE_JUDGE_MODEL", "Qwen/Qwen 3"),
    ("QUOTECITE_NODE_GPUS", "8(x2"),
    ("QUOTECITE_NODE_GPUS", "8(x0)"),
    ("QUOTECITE_PREP_TASKS", "5-2"),
    ("QUOTECITE_EVAL_PHASE", "merge"),
    ("QUOTECITE_VLLM_SERVER", "latest"),
    ("QUOTECITE_RUN_DIR", "runs/a\nb"),
    ("QUOTECITE_STANDIN_SLOW_SAVE", "3"),
]


@pytest.mark.parametrize("name, value", BAD, ids=[f"{n[10:]}={v[:12]!r}" for n, v in BAD])
def test_a_bad_value_is_a_settings_error_naming_the_variable_and_value(name, value):
    (line,) = problems({name: value})
    assert line.startswith(f"{name}={value[:40]!r}"), line
    assert "\n" not in line and len(line) < 300
    if len(value) > 60:
        assert f"({len(value)} characters)" in line


def test_all_problems_are_reported_at_once():
    env = dict(BAD[:1] + BAD[5:6] + BAD[11:12] + BAD[16:17])
    env["QUOTECITE_HEALT_TIMEOUT"] = "30"
    with pytest.raises(SettingsError) as e:
        resolve(env, REPO)
    assert isinstance(e.value, InputError) and isinstance(e.value, ValueError)
    lines = e.value.problems
    assert len(lines) == 5
    message = str(e.value).splitlines()
    assert message[0] == "5 launch settings are wrong:" and [m.strip() for m in message[1:]] == lines
    for name, value in env.items():
        assert sum(line.startswith(f"{name}=") or line.startswith(f"{name} ") for line in lines) == 1
        assert any(value in line or name.endswith("HEALT_TIMEOUT") for line in lines)


def test_an_unknown_variable_is_a_problem_with_a_suggestion():
    assert problems({"QUOTECITE_HEALT_TIMEOUT": "30"}) == [
        "QUOTECITE_HEALT_TIMEOUT is not a setting (did you mean QUOTECITE_HEALTH_TIMEOUT?); "
        "`python -m launch.settings` lists them"
    ]
    assert problems({"QUOTECITE_MAXSTEPS": "3", "QUOTECITE_ZZZ": "1"}) == [
        "QUOTECITE_MAXSTEPS is not a setting (did you mean QUOTECITE_MAX_STEPS?); "
        "`python -m launch.settings` lists them",
        "QUOTECITE_ZZZ is not a setting; `python -m launch.settings` lists them",
    ]
    # other variables are none of our business
    assert resolve({"SLURM_JOB_ID": "7", "QUOTECITEX": "1", "PATH": "/bin"}, REPO).run.max_steps is None


def test_an_empty_variable_means_unset_except_where_empty_is_a_value(tmp_path):
    s = resolve({"QUOTECITE_HEALTH_TIMEOUT": "", "QUOTECITE_MAX_STEPS": "", "QUOTECITE_FLASH_ATTN": ""}, tmp_path)
    assert (s.servers.health_timeout, s.source("health_timeout"), s.run.max_steps) == (1800.0, "default", None)
    assert s.software.flash_attn == "" and s.source("flash_attn") == "environment"


def test_environment_values_are_typed(tmp_path):
    s = resolve({
        "QUOTECITE_HEALTH_TIMEOUT": "30", "QUOTECITE_MAX_STEPS": "12", "QUOTECITE_CHAIN": "0",
        "QUOTECITE_JUDGE_URL": "http://a:8000/v1, http://b:8002/v1", "QUOTECITE_JUDGE_ARGS": "--x 'a b' --y",
        "QUOTECITE_NODE_GPUS": "8(x2),4", "QUOTECITE_RUN_DIR": "runs/r1", "QUOTECITE_JUDGE_PORT": "0",
        "QUOTECITE_STANDIN_SLOW_SAVE": "2:1.5",
    }, tmp_path)  # fmt: skip
    assert (s.servers.health_timeout, s.run.max_steps, s.chain.chain, s.servers.judge_port) == (30.0, 12, False, 0)
    assert s.servers.judge_url == ["http://a:8000/v1", "http://b:8002/v1"]
    assert s.servers.judge_args == ["--x", "a b", "--y"] and s.layout.node_gpus == [8, 8, 4]
    assert s.run.run_dir == Path("runs/r1") and s.test.standin_slow_save == "2:1.5"
    assert s.source("QUOTECITE_MAX_STEPS") == "environment" and s.source("QUOTECITE_STOP_GRACE") == "default"


# ------------------------------------------------------------------------------------------------ templates
def test_repo_and_cross_setting_templates(tmp_path):
    s = resolve({}, tmp_path)
    assert s.run.repo == tmp_path and s.run.run_dir == tmp_path / "runs" / "qwen3vl_8b_grpo"
    assert s.run.ckpt_dir == tmp_path / "runs" / "qwen3vl_8b_grpo" / "checkpoints"
    assert (
        s.software.env_root == tmp_path / ".venv-gpu"
        and s.prep.prep_log_dir == tmp_path / "data" / "longdocurl" / "logs"
    )
    # a default that names an unset setting is unset
    assert s.run.cache_dir is None and s.run.train_files is None and s.text("QUOTECITE_CACHE_DIR") is None
    s = resolve({"QUOTECITE_DATA_DIR": "/d", "QUOTECITE_PREP_SHARDS": "3", "QUOTECITE_RUN_DIR": "/r",
                 "QUOTECITE_PREP_OUT": "/p"}, tmp_path)  # fmt: skip
    assert (s.run.cache_dir, s.source("cache_dir"), s.run.train_files) == (
        Path("/d/cache"),
        "default",
        "/d/train.parquet",
    )
    assert (s.prep.prep_tasks, s.run.ckpt_dir, s.prep.prep_log_dir) == ("1-3", Path("/r/checkpoints"), Path("/p/logs"))
    # set explicitly, the setting wins over its template
    s = resolve({"QUOTECITE_DATA_DIR": "/d", "QUOTECITE_CACHE_DIR": "/c"}, tmp_path)
    assert (s.run.cache_dir, s.source("cache_dir")) == (Path("/c"), "environment")


def test_a_users_value_may_name_the_repository_and_settings_above_it_in_every_layer(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text('run:\n  run_dir: "{repo}/runs/mine"\nprep:\n  prep_log_dir: "{QUOTECITE_PREP_OUT}/slurm-logs"\n')
    env = {"QUOTECITE_PREP_OUT": "{QUOTECITE_RUN_DIR}/prep"}
    s = resolve(env, tmp_path, file=f, sets=["run.cache_dir={QUOTECITE_RUN_DIR}/cache"])
    assert s.run.run_dir == tmp_path / "runs" / "mine" and s.run.ckpt_dir == tmp_path / "runs" / "mine" / "checkpoints"
    assert s.prep.prep_out == tmp_path / "runs" / "mine" / "prep"
    assert s.prep.prep_log_dir == tmp_path / "runs" / "mine" / "prep" / "slurm-logs"
    assert (s.run.cache_dir, s.source("cache_dir")) == (tmp_path / "runs" / "mine" / "cache", "command line")
    # a child given the resolved text resolves the same values
    assert resolve(s.env(), tmp_path) == s
    assert problems({"QUOTECITE_RUN_DIR": "{QUOTECITE_PREP_OUT}/run"}, tmp_path) == [
        "QUOTECITE_RUN_DIR='{QUOTECITE_PREP_OUT}/run': {QUOTECITE_PREP_OUT} is not a setting above this one"
    ]
    assert problems({"QUOTECITE_CACHE_DIR": "{QUOTECITE_DATA_DIR}/c"}, tmp_path) == [
        "QUOTECITE_CACHE_DIR='{QUOTECITE_DATA_DIR}/c': {QUOTECITE_DATA_DIR} is unset"
    ]
    assert problems({}, tmp_path, sets=["run.ckpt_dir={QUOTECITE_NOPE}/c"]) == [
        "QUOTECITE_CKPT_DIR='{QUOTECITE_NOPE}/c' (from --set): {QUOTECITE_NOPE} is not a setting above this one"
    ]


def test_a_template_over_a_bad_setting_is_reported_once(tmp_path):
    assert problems({"QUOTECITE_PREP_SHARDS": "many"}, tmp_path) == [
        "QUOTECITE_PREP_SHARDS='many': expected an integer, got 'many'"
    ]


def test_a_default_built_from_a_bad_value_names_where_it_came_from(tmp_path):
    long_dir = "/" + "d" * 4093  # fits; DATA_DIR/cache does not
    (line,) = problems({"QUOTECITE_DATA_DIR": long_dir}, tmp_path, readers={"reward"})
    assert line.startswith("QUOTECITE_CACHE_DIR='/ddd") and "(its default, from QUOTECITE_DATA_DIR)" in line


def test_readers_choose_what_is_resolved_but_every_set_variable_is_checked(tmp_path):
    s = resolve({"QUOTECITE_JUDGE_URL": "http://j:1/v1"}, tmp_path, readers={"reward"})
    assert s.servers.judge_url == ["http://j:1/v1"] and s.run.ckpt_dir == tmp_path / "runs/qwen3vl_8b_grpo/checkpoints"
    assert s.run.run_dir == tmp_path / "runs/qwen3vl_8b_grpo"  # named by CKPT_DIR's default
    with pytest.raises(KeyError):  # not read: not in the provenance, the field keeps its default
        s.source("health_timeout")
    assert s.servers.health_timeout == 1800.0
    assert all("reward" in BY_NAME[n].reader_set or n == "QUOTECITE_RUN_DIR" for n in s.provenance)
    assert problems({"QUOTECITE_HEALTH_TIMEOUT": "soon"}, tmp_path, readers={"reward"}) == [
        "QUOTECITE_HEALTH_TIMEOUT='soon': expected a number, got 'soon'"
    ]
    with pytest.raises(ValueError, match="readers"):
        resolve({}, tmp_path, readers={"trainer"})


def test_settings_are_read_only(tmp_path):
    s = resolve({}, tmp_path)
    with pytest.raises(AttributeError):
        _ = s.servers.helth_timeout
    with pytest.raises(AttributeError):  # frozen
        s.run.max_steps = 3  # type: ignore[misc]
    with pytest.raises(KeyError):
        s.source("QUOTECITE_NOPE")


# ------------------------------------------------------------------------------------------------ hand-off
def test_env_round_trip(tmp_path):
    given = {
        "QUOTECITE_DATA_DIR": str(tmp_path / "data"), "QUOTECITE_MAX_STEPS": "40", "QUOTECITE_FLASH_ATTN": "",
        "QUOTECITE_JUDGE_ARGS": "--chat-template '{% x %}' --y", "QUOTECITE_JUDGE_URL": "http://a:1/v1,http://b:2/v1",
        "QUOTECITE_NODE_GPUS": "4(x2)", "QUOTECITE_CHAIN": "0", "QUOTECITE_HEALTH_TIMEOUT": "90.5",
    }  # fmt: skip
    s = resolve(given, tmp_path)
    env = s.env()
    assert all(isinstance(k, str) and isinstance(v, str) and k in BY_NAME for k, v in env.items())
    assert env["QUOTECITE_FLASH_ATTN"] == "" and "QUOTECITE_MAX_STEPS" in env and "QUOTECITE_VAL_FILES" not in env
    assert env["QUOTECITE_RUN_DIR"] == f"{tmp_path}/runs/qwen3vl_8b_grpo"  # {repo} filled in
    # the next job may run from another checkout path: what it was handed is what it resolves
    again = resolve(env, tmp_path / "elsewhere")
    assert again == s and list(again.provenance) == list(s.provenance)  # every value (the groups compare)
    assert again.env() == env


# ------------------------------------------------------------------------------------------------ tables, CLI
def test_render_help_groups_every_user_setting_and_keeps_the_test_knobs_apart():
    out, test = render_help(), render_help(test=True)
    for s in SETTINGS:
        mine, other = (test, out) if s.group == "test" else (out, test)
        assert len(re.findall(rf"^  {s.name}\b", mine, re.M)) == 1, s.name
        assert not re.findall(rf"^  {s.name}\b", other, re.M), s.name
    heads = [line.split(":")[0] for line in out.splitlines() if re.match(r"^[a-z]+: ", line)]
    assert heads == [g for g in GROUPS if g != "test"]
    assert [line.split(":")[0] for line in test.splitlines() if re.match(r"^[a-z]+: ", line)] == ["test"]
    assert "QUOTECITE_STANDIN_GATE" in test and "QUOTECITE_BENCH_OUT" in test
    row = next(line for line in out.splitlines() if line.startswith("  QUOTECITE_HEALTH_TIMEOUT "))
    assert row.split()[1:3] == ["1800", "s"] and row.endswith("How long each server may take to answer /health.")


def test_render_markdown_has_one_row_per_setting():
    out, test = render_markdown(), render_markdown(test=True)
    rows = [line for line in out.splitlines() if line.startswith("| `QUOTECITE_")]
    test_rows = [line for line in test.splitlines() if line.startswith("| `QUOTECITE_")]
    assert len(rows) == len(out.splitlines()) - 2 and len(test_rows) == len(test.splitlines()) - 2
    assert len(rows) + len(test_rows) == len(SETTINGS) and all(" | `test." in row for row in test_rows)
    assert not any(" | `test." in row for row in rows)
    for row in rows:
        assert len(re.split(r"(?<!\\)\|", row)) == 7, row  # five cells
    assert "| `QUOTECITE_JUDGE_MODEL` | `Qwen/Qwen3.5-9B` | model id | `models.judge_model` |" in out


def test_render_resolved(tmp_path):
    s = resolve({"QUOTECITE_MAX_STEPS": "7"}, tmp_path)
    lines = render_resolved(s).splitlines()
    assert len(lines) == len(SETTINGS)
    assert re.search(r"^QUOTECITE_MAX_STEPS +\= 7 \(environment\)$", "\n".join(lines), re.M)
    assert re.search(r"^QUOTECITE_HEALTH_TIMEOUT +\= 1800 \(default\)$", "\n".join(lines), re.M)
    assert re.search(r"^QUOTECITE_VAL_FILES +\= \(unset\) \(default\)$", "\n".join(lines), re.M)


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "launch.settings", *args], cwd=REPO, env=clean_env(**env),
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_cli_show_with_bad_values_exits_2_with_one_error_block():
    r = run_cli("show", QUOTECITE_MAX_STEPS="abc", QUOTECITE_HEALTH_TIMEOUT="soon", QUOTECITE_HEALT_TIMEOUT="1")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: 3 launch settings are wrong:\n") and "Traceback" not in r.stderr
    assert "QUOTECITE_MAX_STEPS='abc'" in r.stderr and "QUOTECITE_HEALTH_TIMEOUT='soon'" in r.stderr
    assert "did you mean QUOTECITE_HEALTH_TIMEOUT?" in r.stderr and r.stderr.count("error:") == 1


def test_cli_show_markdown_and_table():
    r = run_cli("show", QUOTECITE_MAX_STEPS="9")
    assert r.returncode == 0 and r.stderr == ""
    assert re.search(r"^QUOTECITE_MAX_STEPS +\= 9 \(environment\)$", r.stdout, re.M)
    assert f"{REPO}/runs/qwen3vl_8b_grpo (default)" in r.stdout
    r = run_cli("markdown")
    assert r.returncode == 0 and r.stdout == render_markdown()
    n_test = sum(s.group == "test" for s in SETTINGS)
    assert sum(line.startswith("| `QUOTECITE_") for line in r.stdout.splitlines()) == len(SETTINGS) - n_test
    r = run_cli("table", "--test")
    assert r.returncode == 0 and r.stdout == render_help(test=True) and "QUOTECITE_STANDIN_GATE" in r.stdout


def test_main_in_process(capsys):
    assert settings.main([]) == 0 and capsys.readouterr().out == render_help()
    assert settings.main(["yaml", "--test"]) == 0 and capsys.readouterr().out == settings.render_yaml(test=True)
    assert "\ntest:  # " in settings.render_yaml(test=True) and "\nservers:" not in settings.render_yaml(test=True)
    with pytest.raises(SystemExit) as e:
        settings.main(["show", "--readers", "trainer"])
    assert e.value.code == 2 and "--readers" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["QUOTECITE_JUDGE_ARGS", "QUOTECITE_EMBED_ARGS"])
@pytest.mark.parametrize("flags", ["--port 9000", "--max-num-seqs 8 --port=9000", "--host 0.0.0.0",
                                   "--served-model-name other", "--model /x"])  # fmt: skip
def test_extra_server_flags_never_contradict_what_the_launch_sets(tmp_path, name, flags):
    # the job waits on the port it chose and asks for the model id: a flag that moves either is refused at start
    with pytest.raises(InputError, match=name):
        settings.resolve({name: flags}, tmp_path)
    assert settings.resolve({name: "--max-num-seqs 8"}, tmp_path).text(name) == "--max-num-seqs 8"


# ------------------------------------------------------------------------------------------------ the typed object
def test_every_field_is_typed_has_one_default_and_a_docstring():
    for group in dataclasses.fields(Settings):
        if group.name == "provenance":
            continue
        cls = group.default_factory
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, group.name
        for f in dataclasses.fields(cls):
            row = BY_NAME["QUOTECITE_" + f.name.upper()]
            assert row.group == group.name and row.help, f.name
            # the field's typed default is its text default parsed (None where the default is a template or unset)
            typed = getattr(cls(), f.name)
            if row.default is None or "{" in row.default:
                assert typed is None, f.name
            else:
                assert typed == row.parse(row.default), f.name
    assert Settings().servers.judge_port == 8000 and Settings().run.preflight is True


def _yaml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "settings.yaml"
    p.write_text(text)
    return p


def test_layers_defaults_file_environment_command_line(tmp_path):
    f = _yaml(tmp_path, "servers:\n  judge_port: 8010\n  embed_port: 8011\n  health_timeout: 60\n"
                        "  judge_args: [--max-num-seqs, '8 8']\nrun:\n  preflight: false\n"
                        "layout:\n  node_addresses: {gpu01: 10.0.0.1}\n")  # fmt: skip
    env = {"QUOTECITE_EMBED_PORT": "8021", "QUOTECITE_HEALTH_TIMEOUT": "70"}
    s = resolve(env, tmp_path, file=f, sets=["servers.health_timeout=80", "max_steps=5"])
    assert (s.servers.judge_port, s.source("judge_port")) == (8010, "file")
    assert (s.servers.embed_port, s.source("embed_port")) == (8021, "environment")
    assert (s.servers.health_timeout, s.source("health_timeout")) == (80.0, "command line")
    assert (s.run.max_steps, s.source("QUOTECITE_MAX_STEPS")) == (5, "command line")
    assert s.servers.judge_args == ["--max-num-seqs", "8 8"] and s.run.preflight is False
    assert s.layout.node_addresses == {"gpu01": "10.0.0.1"}
    assert (s.servers.health_poll, s.source("health_poll")) == (2.0, "default")
    # what a child would not see in the environment, as text that resolves back to the same values
    handed = s.env(("file", "command line"))
    assert "QUOTECITE_EMBED_PORT" not in handed and handed["QUOTECITE_HEALTH_TIMEOUT"] == "80"
    assert resolve({**env, **handed}, tmp_path) == s  # every group's every value
    # QUOTECITE_CONFIG names the file as well
    assert resolve({"QUOTECITE_CONFIG": str(f)}, tmp_path).servers.judge_port == 8010


def test_a_settings_file_names_each_wrong_key_and_value(tmp_path):
    f = _yaml(tmp_path, "server:\n  judge_port: 1\nservers:\n  judge_prt: 1\n  run_dir: x\n  health_timeout: -1\n"
                        "  judge_url: {a: 1}\nrun:\n  config: other.yaml\n")  # fmt: skip
    got = problems({}, tmp_path, file=f)
    assert got == [
        f"settings file {f}: 'server' is not a group (did you mean servers?) (groups: {', '.join(GROUPS)})",
        f"settings file {f}: servers.judge_prt is not a setting (did you mean judge_port?)",
        f"settings file {f}: servers.run_dir is not a setting (run_dir is in group run)",
        f"settings file {f}: servers.judge_url: expected a URLs value, got a dict",
        f"settings file {f}: run.config cannot be set in a settings file",
        f"QUOTECITE_HEALTH_TIMEOUT='-1' (from {f}): expected a number > 0, got '-1'",
    ]
    assert problems({}, tmp_path, file=tmp_path / "nope.yaml")[0].startswith(f"settings file {tmp_path / 'nope.yaml'}")
    assert problems({}, tmp_path, file=_yaml(tmp_path, "- a\n- b\n")) == [
        f"settings file {tmp_path / 'settings.yaml'}: expected groups of settings ({', '.join(GROUPS)}), got a list"
    ]
    assert resolve({}, tmp_path, file=_yaml(tmp_path, "")).source("judge_port") == "default"


def test_set_options_name_each_wrong_key(tmp_path):
    assert problems({}, tmp_path, sets=["servers.judge_port=abc", "servers.judge_prt=1", "nokey"]) == [
        "--set servers.judge_prt: not a setting (did you mean servers.judge_port?); `python -m launch.settings` lists them",
        "--set 'nokey': expected KEY=VALUE (KEY as group.field, e.g. servers.judge_port)",
        "QUOTECITE_JUDGE_PORT='abc' (from --set): expected an integer, got 'abc'",
    ]
    assert resolve({}, tmp_path, sets=["QUOTECITE_CHAIN=0"]).chain.chain is False


def test_cli_show_takes_the_file_and_set_layers(tmp_path):
    f = _yaml(tmp_path, "servers:\n  judge_port: 8010\n")
    r = subprocess.run([PY, "-m", "launch.settings", "show", "--config", str(f), "--set", "ray.ray_port=7000"],
                       cwd=REPO, env=clean_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert re.search(r"^QUOTECITE_JUDGE_PORT +=  ?8010 \(file\)$", r.stdout, re.M), r.stdout
    assert re.search(r"^QUOTECITE_RAY_PORT +=  ?7000 \(command line\)$", r.stdout, re.M)


def test_the_yaml_template_lists_every_user_setting_and_uncommented_gives_the_defaults(tmp_path):
    out = settings.render_yaml()
    user = [s for s in SETTINGS if s.group != "test"]
    assert [ln.split(":")[0].strip("# ") for ln in out.splitlines() if re.match(r"^  # [a-z0-9_]+: ", ln)] == [
        s.short for s in user
    ]
    # uncomment every setting with a default ({repo} and templates too, but for those that name an unset setting):
    # the file resolves to exactly the defaults
    defaults = resolve({}, tmp_path)
    fixed = {s.short for s in user if s.default is not None and defaults.text(s.name) is not None}
    assert {"run_dir", "ckpt_dir", "env_root", "prep_out", "prep_log_dir", "prep_tasks"} <= fixed
    body = "\n".join(ln.replace("  # ", "  ", 1) if ln.startswith("  # ") and ln[4:].split(":")[0] in fixed else ln
                     for ln in out.splitlines())  # fmt: skip
    f = tmp_path / "defaults.yaml"
    f.write_text(body)
    s = resolve({}, tmp_path, file=f)
    assert sum(1 for n in s.provenance if s.source(n) == "file") == len(fixed)
    assert s == resolve({}, tmp_path)  # every group's every value
