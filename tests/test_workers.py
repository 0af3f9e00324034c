"""Tasks side by side in worker processes: answers, failures, CPU shares."""

import os

import pytest

from nohair_jax import workers


def square_in_a_fresh_process(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def refuse(x: int) -> None:
    raise ValueError(f"refused {x}")


def test_every_task_answers_from_its_own_process():
    answers = {}
    workers.run_side_by_side(square_in_a_fresh_process, [(f"t{x}", (x,)) for x in range(3)], jobs=2,
                             done=lambda label, answer: answers.setdefault(label, answer))
    assert {label: value for label, (value, _) in answers.items()} == {"t0": 0, "t1": 1, "t2": 4}
    pids = {pid for _, pid in answers.values()}
    assert len(pids) == 3 and os.getpid() not in pids


def test_a_failure_is_raised_after_the_running_tasks_end_and_no_new_one_starts():
    ended = []
    with pytest.raises(ValueError, match="refused [12]"):  # t1's or t2's, whichever ended first
        workers.run_side_by_side(refuse, [(f"t{x}", (x,)) for x in (1, 2, 3)], jobs=2,
                                 done=lambda label, answer: ended.append((label, type(answer).__name__)))
    assert sorted(ended) == [("t1", "ValueError"), ("t2", "ValueError")]  # t3 never started


def test_cpu_shares_deal_the_cpus_out_in_turn(monkeypatch):
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(workers.os, "sched_setaffinity", lambda pid, cpus: None, raising=False)
    assert workers.cpu_shares(2) == [{0, 2}, {1, 3}]
    assert workers.cpu_shares(4) == [{0}, {1}, {2}, {3}]
    assert workers.cpu_shares(5) == [None] * 5  # more workers than CPUs: none pinned
    assert workers.cpu_shares(1) == [{0, 1, 2, 3}]
