"""Config loading: a minimal file works; every mistake names the file, the key and the problem."""

import pytest

from airlock.config import loader as config
from airlock.errors import ConfigError


def write(tmp_path, text):
    p = tmp_path / "airlock.toml"
    p.write_text(text)
    return p


def test_empty_file_gives_sane_defaults(tmp_path):
    cfg = config.load(write(tmp_path, ""))
    assert cfg.state_dir == "/var/lib/airlock"
    assert cfg.registration.level == "standard"
    assert cfg.healthcheck.budget < 55
    assert cfg.slurm.timeout > 0


def test_env_var_names_the_file(tmp_path, monkeypatch):
    p = write(tmp_path, 'state_dir = "/x"\n')
    monkeypatch.setenv("AIRLOCK_CONFIG", str(p))
    assert config.load().state_dir == "/x"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[slurm]\ntimeout = 'soon'\n", "[slurm] timeout: expected a number, got 'soon'"),
        ("[slurm]\ntimeuot = 3\n", "[slurm] unknown key 'timeuot'"),
        ("bogus = 1\n", "unknown key 'bogus'"),
        ("state_dir = ''\n", "state_dir: must not be empty"),
        ("log_dir = 'var/log/airlock'\n", "log_dir: must be an absolute path"),
        ("shared_dir = 'shared'\n", "shared_dir: must be an absolute path"),
        ("[slurm]\ntimeout = nan\n", "[slurm] timeout: must be a finite number"),
        ("[healthcheck]\nbudget = inf\n", "must be a finite number"),
        ("[registration]\nsuite_timeout = -5\n", "suite_timeout: must be > 0"),
        ("[registration]\nadopt = 'never'\n", "adopt: must be one of"),
        ("[registration]\nslurm_retry = 1e9\n", "slurm_retry: must be between"),
        ("[registration]\nlevel = 'ultra'\n", "[registration] level: must be one of"),
        ("[healthcheck]\nbudget = 90\n", "below Slurm's 60 s"),
        ("[slurm]\ntimeout = -1\n", "timeout: must be > 0"),
        ("slurm = 3\n", "[slurm] must be a table"),
        ("[registration]\nenabled = 'yes'\n", "expected true or false"),
        ("[burnin]\ndtypes = ['fp64']\n", "dtypes: must be one of"),
        ("[slurm\n", "invalid TOML"),
    ],
)
def test_mistakes_are_one_clear_line(tmp_path, text, needle):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        config.load(p).validate()
    msg = str(exc.value)
    assert needle in msg and str(p) in msg and "\n" not in msg


def test_missing_and_unreadable_files(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="file not found"):
        config.load(tmp_path / "nope.toml")
    monkeypatch.setenv("AIRLOCK_CONFIG", str(tmp_path / "named.toml"))
    with pytest.raises(ConfigError, match="named.toml: file not found"):
        config.load()
    with pytest.raises(ConfigError, match="is a directory"):
        config.load(tmp_path)
    p = write(tmp_path, "")
    p.write_bytes(b"\xff\xfe = 1")
    with pytest.raises(ConfigError, match="config"):
        config.load(p)


def test_no_file_at_the_default_path_means_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("AIRLOCK_CONFIG", raising=False)
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "absent.toml"))
    cfg = config.load()
    assert not cfg.exists and cfg.state_dir == "/var/lib/airlock"
    assert cfg.registration.level == "standard" and cfg.problems() == []


def test_retired_keys_warn_instead_of_breaking(tmp_path):
    cfg = config.load(write(tmp_path, "[registration]\nboot_tolerance = 10\n"))
    assert cfg.registration.level == "standard"
    assert any("boot_tolerance is ignored" in w for w in cfg.warnings)


@pytest.mark.parametrize("text, expect", [
    ('state_dir = "/srv/s"\n[slurm]\nconf = "/etc/x.conf"\nbin_dir = "/opt/s/bin"\n'
     "[registration]\nenabled = false\noops = = 3\n",
     {"state_dir": "/srv/s", "slurm.conf": "/etc/x.conf", "slurm.bin_dir": "/opt/s/bin",
      "registration.enabled": False}),
    ('state_dir = "relative"\n[slurm]\nconf = 3\n',
     {"state_dir": "/var/lib/airlock", "slurm.conf": "", "registration.enabled": True}),
    ('[other]\nstate_dir = "/not/top/level"\n[slurm\n',
     {"state_dir": "/var/lib/airlock"}),
])
def test_salvage_reads_what_a_hook_needs_from_a_broken_file(tmp_path, text, expect):
    got = config.salvage(str(write(tmp_path, text)))
    assert {k: got[k] for k in expect} == expect


def test_salvage_of_a_missing_file_is_the_defaults(tmp_path):
    assert config.salvage(str(tmp_path / "nope"))["log_dir"] == "/var/log/airlock"


def _gate(path) -> bool:
    """registration.enabled as a hook reads it: the loaded config, else what salvage finds."""
    try:
        return config.load(path).registration.enabled
    except ConfigError:
        return config.salvage(str(path))["registration.enabled"]


def test_a_torn_read_never_switches_the_gate_off(tmp_path):
    """docs/guide.md: a hook that reads airlock.toml while it is rewritten in place sees only
    the bytes written so far. Cut anywhere before the end of `enabled = false`, the gate stays
    on: the cut value does not parse (and salvage does not read it), and every key not yet
    written has its default, which keeps the gate on."""
    from airlock.admin import render

    text = render.example_config()
    on = "[registration]\n# quarantine new and rebooted nodes at slurmd start until their " \
         "registration suite passes\nenabled = true\n"
    assert on in text
    text = text.replace(on, on.replace("enabled = true", "enabled = false"))
    end = text.index("enabled = false") + len("enabled = false")
    # every line end, and every byte of the [registration] table's lines
    start = text.index("[registration]")
    cuts = sorted({i + 1 for i, c in enumerate(text[:end]) if c == "\n"} |
                  set(range(start, end)))
    path = tmp_path / "airlock.toml"
    for cut in cuts:
        path.write_text(text[:cut])
        assert _gate(path) is True, repr(text[max(0, cut - 40):cut])
    path.write_text(text)
    assert _gate(path) is False  # the whole file says what it says


def test_every_section_is_declared_on_config_for_the_type_checker():
    """`cfg.<section>` is typed as the class SECTIONS builds (issue 24: an editor and mypy follow
    cfg.x.y); a section added to SECTIONS without its declaration, or declared as another
    class, fails here."""
    import ast
    import inspect

    from airlock.config import loader

    tree = ast.parse(inspect.getsource(loader))
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config")
    block = next(n for n in config.body if isinstance(n, ast.If)
                 and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING")
    declared = {n.target.id: n.annotation.id for n in block.body
                if isinstance(n, ast.AnnAssign)}
    assert declared == {name: target.rpartition(":")[2]
                        for name, target in loader.SECTIONS.items()}
    imported = {alias.name: node.module for node in tree.body if isinstance(node, ast.If)
                for node in node.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    for name, target in loader.SECTIONS.items():
        module, _, cls = target.partition(":")
        assert imported.get(cls) == module, (name, cls)
