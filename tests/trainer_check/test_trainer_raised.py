"""trainer_raised.where: how an exception the trainer raised is said, one line at the user's own
line, and, for one raised `from` another (a framework's wrapper), with the first of its chain.

    python -m pytest -q tests/trainer_check/test_trainer_raised.py
"""

from __future__ import annotations

import pytest

from pclab.experiments.trainer_check.trainer_raised import where

SOURCE = """
def inner():
    raise ValueError("nan loss encountered at step 2")

def middle():
    try:
        inner()
    except ValueError as exc:
        raise KeyError("bookkeeping") from exc

def fit(chained):
    if not chained:
        return 1 / 0
    try:
        middle()
    except KeyError as exc:
        raise RuntimeError("An error occurred") from exc
"""


def _raised(tmp_path, chained: bool) -> tuple[BaseException, object]:
    path = tmp_path / "trainer.py"
    path.write_text(SOURCE)
    scope: dict = {}
    exec(compile(SOURCE, str(path), "exec"), scope)  # frames at the file's own lines
    with pytest.raises(Exception) as caught:
        scope["fit"](chained)
    return caught.value, path


def test_a_plain_exception_is_said_at_the_users_line(tmp_path):
    exc, path = _raised(tmp_path, chained=False)
    assert where(exc, path, "train_loop") == (
        "trainer.py:13 in fit: ZeroDivisionError: division by zero"
    )


def test_a_chained_exception_names_the_first_of_its_chain(tmp_path):
    exc, path = _raised(tmp_path, chained=True)
    assert where(exc, path, "train_loop") == (
        "trainer.py:17 in fit: RuntimeError: An error occurred "
        "(from ValueError: nan loss encountered at step 2)"
    )
