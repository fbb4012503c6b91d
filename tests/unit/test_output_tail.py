"""What a failed run shows of its ranks' output: the errors, not a peer's traceback frames
(one launcher's output merges every rank's: srun, mpirun)."""

from dlscale.contract.text import without_traceback_frames


def test_traceback_frames_are_left_out_and_each_error_kept():
    tail = [
        "0: rank 0 lost its peer",
        "0: Traceback (most recent call last):",
        '0:   File "/x/loop.py", line 3, in step',
        "0:     loss.backward()",
        "0: RuntimeError: Connection reset by peer",
        "srun: error: dlsnode2: task 1: Killed",
        "[1,0]<stderr>:Traceback (most recent call last):",
        '[1,0]<stderr>:  File "a.py", line 1',
        "[1,0]<stderr>:ValueError: x",
        "Traceback (most recent call last):",
        '  File "b.py", line 2, in <module>',
        "KeyError: 'y'",
    ]
    assert without_traceback_frames(tail) == [
        "0: rank 0 lost its peer",
        "0: RuntimeError: Connection reset by peer",
        "srun: error: dlsnode2: task 1: Killed",
        "[1,0]<stderr>:ValueError: x",
        "KeyError: 'y'",
    ]
    assert not any("Traceback" in line for line in without_traceback_frames(tail))
