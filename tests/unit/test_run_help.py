"""``dlscale run --help`` says what each study flag means and its default (issue 71): the
key's own field doc, the core default, and what the bare `dlscale run` sets instead."""

import argparse

from dlscale.cli.run import DEFAULT_STUDY, FLAGS, add_arguments
from dlscale.contract.run_config import config_defaults, fields_doc


def _helps() -> dict[str, str]:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return {a.dest: a.help or "" for a in parser._actions}


def test_every_study_flag_says_its_meaning_and_default():
    helps, docs, defaults = _helps(), fields_doc(), config_defaults()
    for key in FLAGS.values():
        assert helps[key].startswith(docs[key] + " (default: "), key
        default = defaults[key]
        assert f"(default: {'none' if default is None else default}" in helps[key], key
    # what a bare run sets instead is said where it differs, as the bare run does it
    assert "(default: 10; a bare `dlscale run`: 8;" in helps["steps"]
    assert DEFAULT_STUDY["steps"] == 8
    assert "(default: 1; a bare `dlscale run`: 1,2;" in helps["workers"]
    assert "A..B: the powers of 2 from A to B" in helps["workers"]
    assert helps["scaling"].startswith("weak: fixed per-worker batch; strong:")
