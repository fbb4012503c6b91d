"""Published claims: read from a study file, kept beside the runs, computed from the points
with a verdict against values worked out by hand (config/claims.py, store/claims.py,
metrics/claims.py)."""

import os
from pathlib import Path

import numpy as np
import pytest

from dlscale.cli.claims import claims_table
from dlscale.cli.tables import console
from dlscale.config.claims import Claim
from dlscale.config.presets import load_preset
from dlscale.config.study import load_study_file, parse_set
from dlscale.contract.backends import BACKENDS
from dlscale.contract.errors import UserError
from dlscale.contract.files import OutputError
from dlscale.contract.result import Result
from dlscale.contract.run_config import RunConfig
from dlscale.metrics.claims import ClaimVerdict, check_claims
from dlscale.metrics.scaling import add_scaling
from dlscale.metrics.stats import ratio_ci95
from dlscale.report.claims import claims_section
from dlscale.store.claims import claims_path, read_claims, write_claims
from dlscale.store.results import RunStore

SINGLE = [100.0, 102.0, 98.0]
DDP2 = [190.0, 192.0, 188.0]


def run(backend: str, workers: int, windows: list[float], **config: object) -> Result:
    """A completed run of ``backend`` whose windows measured ``windows`` img/s."""
    cfg = RunConfig.make(
        model="tiny", backend=backend, workers=workers, **{"threads_per_worker": 1, **config}
    )
    spec = BACKENDS.get(backend)
    return Result(
        run_id=cfg.run_id(),
        status="completed",
        framework=spec.framework,
        reference=spec.reference,
        study="s",
        config=cfg.to_dict(),
        metrics={
            "throughput_samples_s": float(np.mean(windows)),
            "throughput_windows_samples_s": windows,
        },
    )


def claim(published: float, of: dict, over: dict | None = None, **fields: object) -> Claim:
    values: dict = {"id": "c", "says": "a claim", "source": "a paper", "needs": {}, **fields}
    measure = "ratio" if over is not None else "speedup"
    return Claim(measure=measure, of=of, over=over, published=published, **values)


def checked(claims: list[Claim], runs: list[Result]):
    return check_claims(claims, add_scaling(runs))


RUNS = [run("torch-single", 1, SINGLE), run("torch-ddp", 1, [99.0, 97.0, 98.0]),
        run("torch-ddp", 2, DDP2)]  # fmt: skip


def test_a_speedup_claim_is_the_points_speedup_with_its_fieller_interval():
    (check,) = checked([claim(1.9, {"backend": "torch-ddp"})], RUNS)
    ratio, interval = ratio_ci95(DDP2, SINGLE)  # by hand: windows against windows
    assert check.measured == pytest.approx(190.0 / 100.0) == pytest.approx(ratio)
    assert check.interval == pytest.approx(interval)
    assert check.verdict is ClaimVerdict.HOLDS  # 1.9 inside [1.83, 1.97]
    assert check.at == "torch-ddp x2, 1 thr over torch-single x1, 1 thr"


@pytest.mark.parametrize(
    "published, verdict, said",
    [
        (1.9, ClaimVerdict.HOLDS, "inside the 95% interval"),
        (10.11, ClaimVerdict.SAME_DIRECTION, "faster here too, but by 1.90x, not 10.11x"),
        (1.2, ClaimVerdict.SAME_DIRECTION, "faster here too"),
        (0.5, ClaimVerdict.CONTRADICTED, "the other way round here (1.90x)"),
    ],
)
def test_the_verdict_sets_the_published_value_against_the_interval(published, verdict, said):
    (check,) = checked([claim(published, {"backend": "torch-ddp"})], RUNS)
    assert check.verdict is verdict and said in check.why


def test_an_interval_that_reaches_one_contradicts_a_published_speedup_it_excludes():
    noisy = [run("torch-single", 1, SINGLE), run("torch-ddp", 2, [60.0, 140.0, 100.0])]
    (check,) = checked([claim(3.22, {"backend": "torch-ddp"})], noisy)
    assert check.interval is not None and check.interval[0] < 1 < check.interval[1]
    assert check.verdict is ClaimVerdict.CONTRADICTED
    assert "includes 1" in check.why and "3.22x" in check.why


def test_a_ratio_pairs_points_at_the_most_workers_both_ran_on_the_same_settings():
    ring = [95.0, 96.0, 97.0]
    runs = [*RUNS, run("torch-ring", 1, ring), run("torch-ring", 2, ring),
            run("torch-ring", 2, [50.0, 51.0, 49.0], batch_size=32)]  # fmt: skip
    (check,) = checked([claim(2.0, {"backend": "torch-ddp"}, {"backend": "torch-ring"})], runs)
    assert check.measured == pytest.approx(190.0 / 96.0)  # not the batch-32 ring run
    assert check.interval == pytest.approx(ratio_ci95(DDP2, [95.0, 96.0, 97.0])[1])
    assert check.at == "torch-ddp x2, 1 thr over torch-ring x2, 1 thr"
    assert check.verdict is ClaimVerdict.HOLDS


def test_a_ratio_selects_by_backend_option_and_sets_two_modes_of_one_engine_against_each_other():
    runs = [run("torch-ps", 2, [150.0, 151.0, 149.0], ps_mode="async"),
            run("torch-ps", 2, [100.0, 101.0, 99.0], ps_mode="sync")]  # fmt: skip
    of, over = (
        {"backend": "torch-ps", "ps_mode": "async"},
        {"backend": "torch-ps", "ps_mode": "sync"},
    )
    (check,) = checked([claim(1.5, of, over)], runs)
    assert check.measured == pytest.approx(1.5) and check.verdict is ClaimVerdict.HOLDS


def test_each_point_of_a_grid_the_claim_spans_is_checked_and_named():
    runs = [*RUNS, run("torch-single", 1, SINGLE, batch_size=32),
            run("torch-ddp", 2, [100.0, 101.0, 99.0], batch_size=32)]  # fmt: skip
    checks = checked([claim(1.9, {"backend": "torch-ddp"})], runs)
    assert sorted(c.at.rpartition(", ")[2] for c in checks) == ["batch_size=32", "batch_size=64"]
    assert sorted(c.verdict for c in checks) == [ClaimVerdict.CONTRADICTED, ClaimVerdict.HOLDS]


def test_a_claim_the_study_cannot_meet_says_what_it_needs_and_what_ran():
    needs = {"workers": 12, "device": "cuda"}
    (check,) = checked([claim(10.11, {"backend": "torch-ddp"}, needs=needs)], RUNS)
    assert check.verdict is ClaimVerdict.NOT_MEASURABLE and check.measured is None
    assert check.why == (
        "needs workers=12, device=cuda; this study's runs of it have workers 1, 2; device cpu"
    )
    (absent,) = checked([claim(2.0, {"backend": "torch-ddp"}, {"backend": "tf-ps"})], RUNS)
    assert absent.why == "this study has no completed run of backend=tf-ps"
    (none,) = checked([claim(2.0, {"backend": "horovod-torch"})], RUNS)
    assert none.verdict is ClaimVerdict.NOT_MEASURABLE and "horovod-torch" in none.why


def test_one_sample_a_side_shows_the_ratio_but_gives_no_verdict():
    runs = [run("torch-single", 1, [100.0]), run("torch-ddp", 2, [190.0])]
    (check,) = checked([claim(1.9, {"backend": "torch-ddp"})], runs)
    assert check.measured == pytest.approx(1.9) and check.interval is None
    assert check.verdict is ClaimVerdict.NOT_MEASURABLE and "no 95% interval" in check.why


def test_a_failed_run_is_not_measured():
    failed = Result.from_document({**RUNS[2].document(), "status": "failed", "error": "boom"})
    (check,) = checked([claim(1.9, {"backend": "torch-ddp"})], [*RUNS[:2], failed])
    assert check.verdict is ClaimVerdict.NOT_MEASURABLE  # only its 1-worker point is left


def _study_file(tmp_path: Path, claims: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(f'backend = "torch-ddp"\nworkers = [1, 2]\n{claims}')
    return path


GOOD = """
[[claims]]
id = "ps-async"
says = "asynchronous is 1.5x synchronous"
source = "a paper, table 2"
of = { backend = "torch-ps", ps_mode = "async" }
over = { backend = "torch-ps", ps_mode = "sync" }
published = 1.5
needs = { workers = "2" }
"""


def test_a_study_file_carries_its_claims_typed(tmp_path):
    (read,) = load_study_file(_study_file(tmp_path, GOOD))["claims"]
    assert read.measure == "ratio" and read.published == 1.5
    assert read.needs == {"workers": 2}  # in the key's type
    assert dict(read.of) == {"backend": "torch-ps", "ps_mode": "async"}


@pytest.mark.parametrize(
    "change, said",
    [
        (("published = 1.5", "published = 0"), "published must be a number above 0"),
        (("published = 1.5", "published = nan"), "published must be a number above 0"),
        (("published = 1.5", "published = true"), "published must be a number above 0"),
        (("published = 1.5", 'published = "1.5"'), "published must be a number above 0"),
        (('id = "ps-async"', 'id = "a b"'), "id must be letters"),
        (('over = { backend = "torch-ps", ps_mode = "sync" }', 'measure = "ratio"'),
         "a ratio needs `over`"),
        (("published = 1.5", 'published = 1.5\nmeasure = "speedup"'), "a speedup has none"),
        (('of = { backend = "torch-ps", ps_mode = "async" }', 'of = { frobnicate = 1 }'),
         "of: unknown key 'frobnicate'"),
        (('ps_mode = "async"', 'ps_mode = "maybe"'), "no plug-in accepts ps_mode = 'maybe'"),
        (('ps_mode = "async"', 'ps_mode = ["async"]'), "ps_mode must be one value"),
        (('says = "asynchronous is 1.5x synchronous"', 'says = ""'), "says must be a non-empty"),
        (("published = 1.5", "published = 1.5\nverdict = 1"), "unknown key 'verdict'"),
        (("[[claims]]", "[claims]"), "claims must be [[claims]] tables"),
    ],
)  # fmt: skip
def test_a_bad_claim_is_one_line_naming_it(tmp_path, change, said):
    with pytest.raises(UserError) as error:
        load_study_file(_study_file(tmp_path, GOOD.replace(*change)))
    assert said in str(error.value) and "\n" not in str(error.value)


def test_two_claims_with_one_id_and_claims_on_the_command_line_are_refused(tmp_path):
    with pytest.raises(UserError, match="two claims have the id 'ps-async'"):
        load_study_file(_study_file(tmp_path, GOOD + GOOD))
    with pytest.raises(UserError, match="unknown key 'claims'"):
        parse_set(["claims=x"])


def test_claims_are_kept_beside_the_runs_and_read_back(tmp_path):
    (read,) = load_study_file(_study_file(tmp_path, GOOD))["claims"]
    speedup = claim(1.9, {"backend": "torch-ddp"})
    store = RunStore(tmp_path / "results")
    write_claims(store, "nik/../2021 \x1b[2J", (read, speedup))
    path = claims_path(store.root, "nik/../2021 \x1b[2J")
    assert path.parent == store.root and path.name.startswith("claims-nik____2021___2J-")
    assert read_claims(store.root) == {"nik/../2021 \x1b[2J": (read, speedup)}
    write_claims(store, "nothing", ())  # a study without claims leaves no file
    assert sorted(p.name for p in store.root.iterdir()) == [path.name]


def test_a_damaged_or_planted_claims_file_is_left_out_with_one_line(tmp_path):
    store = RunStore(tmp_path)
    write_claims(store, "good", (claim(1.9, {"backend": "torch-ddp"}),))
    (tmp_path / "claims-bad.json").write_bytes(b"\x00garbage")
    (tmp_path / "claims-forged.json").write_text(
        '{"schema": "dlscale.claims/1", "study": "x", "claims": [{"id": "c"}]}'
    )
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    os.symlink(victim, tmp_path / "claims-link.json")
    os.mkfifo(tmp_path / "claims-fifo.json")  # read, it would block the report forever
    (tmp_path / "claims-huge.json").write_bytes(b" " * (2 << 20))
    problems: list[str] = []
    assert list(read_claims(tmp_path, problems.append)) == ["good"]
    assert len(problems) == 5 and all("\n" not in p for p in problems)
    assert any("claims-forged.json" in p and "claim 1 (c)" in p for p in problems)
    os.symlink(victim, claims_path(tmp_path, "linked"))
    with pytest.raises(OutputError):  # never written through a planted link
        write_claims(store, "linked", (claim(1.9, {"backend": "torch-ddp"}),))
    assert victim.read_text() == "{}"


def test_claim_text_is_data_in_the_terminal_and_the_page():
    hostile = claim(
        1.9, {"backend": "torch-ddp"}, says="[bold]x[/] <script>alert(1)</script>\x1b[2J"
    )
    page = claims_section((hostile,), add_scaling(RUNS))
    assert "<script>" not in page and "&lt;script&gt;" in page and "\x1b" not in page
    out = console()
    with out.capture() as captured:
        out.print(claims_table(check_claims([hostile], add_scaling(RUNS)), "t"))
    text = captured.get()
    assert "[bold]x[/]" in text and "\x1b" not in text and "\\x1b[2J" in text


def test_the_presets_claims_name_engines_their_full_scale_runs():
    for name in ("mahon2020", "nikolaidis2021"):
        settings, _, _ = load_preset(name)
        backends = set(settings["backend"])
        assert settings["claims"], name
        for each in settings["claims"]:
            assert each.of["backend"] in backends and each.source and each.assumed
            assert each.over is None or each.over["backend"] in backends


def test_a_claims_source_is_wrapped_at_words_to_the_terminal():
    """mahon2020's source and assumption ran to 207 columns on one line in a 100-column
    terminal, which broke it mid-word."""
    import io

    from rich.console import Console

    from dlscale.cli.claims import print_claims

    long = claim(1.9, {"backend": "torch-ddp"}, source="a paper " * 30)
    out = Console(width=100, file=io.StringIO(), record=True, force_terminal=True)
    print_claims(out, "s", (long,), add_scaling(RUNS))
    lines = out.export_text().splitlines()
    assert max(map(len, lines)) <= 100
    assert "a paper a paper" in " ".join(line.strip() for line in lines[-4:])
