"""Mends the race in the reduce-scatter of the Gloo that Horovod 0.28.1 bundles
(third_party/gloo/gloo/reduce_scatter.h, ``ReduceScatterHalvingDoubling::run``), for
scripts/build-horovod.sh: the sends of the reduce-scatter steps (and those to a larger block,
and the distribution phase's) read the caller's buffer, and the distribution phase then
overwrites it (every rank but 0 copies its reduced part to the buffer's start) without waiting
for them; a send the socket had not taken whole went out overwritten, and the peer summed that
rank's result instead of its input. Each send is now waited for (``waitSend``) before the buffer
is written. Refuses, exit 1, a file that is not the one this patch was written against.

    python scripts/patch-gloo-reduce-scatter.py PATH/TO/reduce_scatter.h
"""

import sys
from pathlib import Path

DISTRIBUTION = "    // Distribution phase: Scatter/distribute based on user specified\n"
WAIT_STEPS = """\
    // dlscale's build: the sends above read ptrs_[0], which the distribution phase below
    // overwrites; wait until each has left (a send still queued went out overwritten)
    for (int i = 0; i < stepsWithinBlock_; i++) {
      if (sendOffsets_[i] < count_) {
        sendDataBufs_[i]->waitSend();
      }
    }
    if (nextLargerBlockSize_ != 0 && totalItemsToSend != 0) {
      const auto numSendsToLargerBlock = nextLargerBlockSize_ / myBinaryBlockSize_;
      for (int i = 0; i < numSendsToLargerBlock; i++) {
        if (sendCountToLargerBlock_ * i < totalItemsToSend) {
          largerBlockSendDataBufs_[i]->waitSend();
        }
      }
    }

"""
RECEIVES = "    index = 0;\n    bufferOffset = 0;\n    for (const auto& distMap : distMapForRecv_) {\n"
WAIT_DISTRIBUTION = """\
    for (int i = 0; i < index; i++) {  // dlscale's build: as above, before ptrs_[0] is written
      distSendDataBufs_[i]->waitSend();
    }
"""


def main(path: Path) -> int:
    text = path.read_text()
    if "dlscale's build" in text:
        return 0  # patched already
    if text.count(DISTRIBUTION) != 1 or text.count(RECEIVES) != 1:
        print(f"patch-gloo-reduce-scatter: {path} is not Horovod 0.28.1's Gloo", file=sys.stderr)
        return 1
    text = text.replace(DISTRIBUTION, WAIT_STEPS + DISTRIBUTION)
    text = text.replace(RECEIVES, WAIT_DISTRIBUTION + RECEIVES)
    path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
