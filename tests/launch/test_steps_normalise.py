"""The comparison of a job's steps with its dry run's (``tests/launch/test_launch_steps.py``) replaces the job id by
structure, never by substring: a job id that also occurs in the run name, a step count, a time or a GPU list is
left alone, whatever the id (Slurm numbers jobs from 1, so small ids meet small numbers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support.slurm import normalise_steps


def job_steps(job: str, segment: str, name: str, port: int, steps: int, gpus: str, tmp: str = "4") -> list[dict]:
    """Step records shaped as ``launch.executor.Step.record`` writes them for a job ``job`` (the places where the
    launch writes a job id, and numbers that may look like one), of a run under pytest's folder ``tmp``."""
    seg = f"/tmp/pytest-of-root/pytest-{tmp}/t0/{name}/{tmp}/run/segments/{segment}"
    judge = {"kind": "start", "name": "judge", "argv": ["vllm", "--port", "{port}", "--host", "127.0.0.1"]}
    trainer = {"kind": "start", "name": "trainer", "gpus": gpus, "log": f"{seg}/trainer.log"}
    trainer["argv"] = ["python", "-m", "reward.train", f"trainer.max_steps={steps}", f"trainer.project={name}"]
    trainer["env"] = dict(QUOTECITE_SEGMENT=segment, QUOTECITE_METRICS_DIR=seg, RAY_TMPDIR=f"/tmp/qcray-{job}")
    trainer["env"]["QUOTECITE_JUDGE_URL"] = f"http://127.0.0.1:{port}/v1"
    trainer["text"] = f"wait at most {steps}s for {seg}/judge.port"
    requeue = {"kind": "run", "name": "requeue", "argv": ["scontrol", "requeue", job]}
    return [{**judge, "log": f"{seg}/judge.log", "gpus": gpus}, trainer, requeue]


def test_a_job_id_inside_the_run_name_or_a_number_is_left_alone():
    # The failure seen in CI: job 33 and the run name qc-test-33fdcbc1; and job 4 with max_steps=4 (fresh Slurm).
    cases = [("33", "35", "qc-test-33fdcbc1", 4), ("4", "6", "qc-test-4a4b4c4d", 4)]
    cases += [("10", "12", "qc-test-10000000", 10), ("1", "3", "qc-test-1-1", 1)]
    for job, dry, name, steps in cases:
        ran = job_steps(job, f"{job}-0", name, 8000, steps, "0,1", tmp=job)  # pytest's folder number is the id
        printed = job_steps(dry, "JOBID-N", name, 8001, steps, "0,1", tmp=job)
        assert normalise_steps(ran, job) == normalise_steps(printed, dry)
        out = normalise_steps(ran, job)
        assert out[1]["argv"][-2:] == [f"trainer.max_steps={steps}", f"trainer.project={name}"]
        assert out[2]["argv"] == ["scontrol", "requeue", "JOBID"]
        assert out[1]["env"]["QUOTECITE_SEGMENT"] == "JOBID-N" and out[1]["env"]["RAY_TMPDIR"] == "/tmp/qcray-JOBID"


def test_a_real_difference_is_still_seen():
    ran = job_steps("33", "33-0", "qc-test-33fdcbc1", 8000, 4, "0,1")
    for changed in (
        job_steps("35", "JOBID-N", "qc-test-33fdcbc1", 8000, 5, "0,1"),  # another step count
        job_steps("35", "JOBID-N", "qc-test-35fdcbc1", 8000, 4, "0,1"),  # another run name
        job_steps("35", "JOBID-N", "qc-test-33fdcbc1", 8000, 4, "0"),  # another GPU list
    ):
        assert normalise_steps(ran, "33") != normalise_steps(changed, "35")


@given(
    job=st.integers(1, 10**7).map(str),
    dry=st.integers(1, 10**7).map(str),
    name=st.text("0123456789abcdef", min_size=8, max_size=8).map(lambda h: f"qc-test-{h}"),
    restart=st.integers(0, 50),
    steps=st.integers(1, 10**6),
    ports=st.tuples(st.integers(1, 65535), st.integers(1, 65535)),
)
def test_any_two_job_ids_compare_equal_and_nothing_else_changes(job, dry, name, restart, steps, ports):
    ran = job_steps(job, f"{job}-{restart}", name, ports[0], steps, "0,1", tmp=job)
    printed = job_steps(dry, "JOBID-N", name, ports[1], steps, "0,1", tmp=job)
    assert normalise_steps(ran, job) == normalise_steps(printed, dry)
    assert normalise_steps(ran, job)[1]["argv"][3:] == [f"trainer.max_steps={steps}", f"trainer.project={name}"]
