"""The allocator key as data: each choice's variables, the preload in front of the parent's,
the library search, and the one-line refusal when a library is missing.

The libraries are Debian's libjemalloc2 and libtcmalloc-minimal4, which make test installs
(scripts/install-allocators.sh): a missing one fails here, it is not skipped."""

from pathlib import Path

from dlscale.cli import main
from dlscale.config import RunConfig
from dlscale.contract.run_checks import ALLOCATORS
from dlscale.launchers.base import common_env
from dlscale.launchers.local import LocalLauncher
from dlscale.preflight import check_allocator
from dlscale.runtime import allocator
from dlscale.runtime.allocator import (
    GLIBC_TUNED,
    PRELOADED,
    Preloaded,
    allocator_env,
    library_path,
    loaded_allocator,
)

JEMALLOC = library_path("jemalloc")
TCMALLOC = library_path("tcmalloc")


def test_every_choice_of_the_key_has_a_meaning():
    assert set(ALLOCATORS) == {"system", "glibc-tuned", *PRELOADED}
    for name in ALLOCATORS:
        allocator_env(name, {})  # no choice is refused here (the libraries are installed)


def test_system_sets_nothing_and_glibc_tuned_fixes_both_thresholds():
    assert allocator_env("system", {"LD_PRELOAD": "/opt/x.so"}) == {}
    env = allocator_env("glibc-tuned", {"LD_PRELOAD": "/opt/x.so"})
    assert env == {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
    # above glibc's dynamic maximum (32 MiB), so no activation buffer is mapped per step
    assert int(env["MALLOC_MMAP_THRESHOLD_"]) > 32 * 2**20
    assert int(env["MALLOC_TRIM_THRESHOLD_"]) >= int(env["MALLOC_MMAP_THRESHOLD_"])


def test_preloaded_allocators_name_their_library_and_settings():
    assert JEMALLOC is not None and JEMALLOC.name == "libjemalloc.so.2" and JEMALLOC.is_file()
    assert TCMALLOC is not None and TCMALLOC.name == "libtcmalloc_minimal.so.4"
    assert allocator_env("jemalloc", {}) == {
        "LD_PRELOAD": str(JEMALLOC),
        "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1",
    }
    assert allocator_env("tcmalloc", {}) == {
        "LD_PRELOAD": str(TCMALLOC),
        "TCMALLOC_RELEASE_RATE": "0",
    }


def test_the_library_goes_in_front_of_the_parents_preload():
    env = allocator_env("jemalloc", {"LD_PRELOAD": "/opt/a.so /opt/b.so"})
    assert env["LD_PRELOAD"] == f"{JEMALLOC}:/opt/a.so:/opt/b.so"
    env = allocator_env("tcmalloc", {"LD_PRELOAD": f"/opt/a.so:{TCMALLOC}"})
    assert env["LD_PRELOAD"] == f"{TCMALLOC}:/opt/a.so"  # not twice
    assert allocator_env("jemalloc", {"LD_PRELOAD": ""})["LD_PRELOAD"] == str(JEMALLOC)


def test_the_parents_preload_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/opt/parent.so")
    assert allocator_env("jemalloc")["LD_PRELOAD"] == f"{JEMALLOC}:/opt/parent.so"


def test_library_search(tmp_path: Path):
    assert library_path("system") is None and library_path("glibc-tuned") is None
    assert library_path("jemalloc", [tmp_path]) is None
    (tmp_path / "libjemalloc.so.2").write_bytes(b"")
    assert library_path("jemalloc", [tmp_path / "none", tmp_path]) == tmp_path / "libjemalloc.so.2"
    assert allocator.library_dirs()[0].name.endswith("-linux-gnu")  # multiarch first (Debian)


def test_the_loader_cache_finds_an_installed_library():
    found = allocator._from_loader_cache("libjemalloc.so.2")
    assert found is not None and JEMALLOC is not None
    assert found.resolve() == JEMALLOC.resolve()
    assert allocator._from_loader_cache("libdlscale-absent.so.9") is None


def test_every_worker_command_gets_the_variables(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    spec = tmp_path / "run" / "spec.json"
    env = common_env(RunConfig.make(model="tiny", allocator="jemalloc"), spec, 2)
    assert env["LD_PRELOAD"] == str(JEMALLOC) and env["OMP_NUM_THREADS"] == "2"
    assert "LD_PRELOAD" not in common_env(RunConfig.make(model="tiny", allocator="system"), spec, 2)
    cfg = RunConfig.make(workers=2, model="tiny", allocator="glibc-tuned")
    plan = LocalLauncher().plan(cfg, spec, "/py", ports=(29555,), cores=2)
    for entry in plan.entries:
        assert {k: entry.env[k] for k in GLIBC_TUNED} == GLIBC_TUNED


def test_this_process_runs_glibc(monkeypatch):
    provider = allocator._malloc_provider()
    assert provider is not None and provider.name.startswith("libc")
    for key in GLIBC_TUNED:
        monkeypatch.delenv(key, raising=False)
    assert loaded_allocator() == "system"
    for key, value in GLIBC_TUNED.items():
        monkeypatch.setenv(key, value)
    assert loaded_allocator() == "glibc-tuned"


def test_a_missing_library_is_one_line_before_launch(tmp_path: Path, capsys, monkeypatch):
    absent = Preloaded("libdlscale-absent.so.9", "libjemalloc2", "libjemalloc")
    monkeypatch.setitem(PRELOADED, "jemalloc", absent)
    results = tmp_path / "r"
    study = tmp_path / "point.toml"
    study.write_text('backend = "torch-single"\nmodel = "tiny"\nworkers = 1\n')
    for dry_run in (["--dry-run"], []):
        argv = ["run", str(study), "--set", "allocator=jemalloc", "--results", str(results)]
        try:
            code = main([*argv, *dry_run])
        except SystemExit as exit_:
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and err.startswith("dlscale: error:"), err
        assert "allocator = jemalloc needs libdlscale-absent.so.9" in err
        assert "Debian package libjemalloc2" in err and "scripts/install-allocators.sh" in err
        assert "Traceback" not in err
    assert not results.exists()  # nothing was launched
    check_allocator("system")
    check_allocator("tcmalloc")
