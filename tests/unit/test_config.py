"""Config loading: a minimal file works; every mistake names the file, the key and the problem."""

import pytest

from airlock import config
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
        config.load(p)
    msg = str(exc.value)
    assert needle in msg and str(p) in msg and "\n" not in msg


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        config.load(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="is a directory"):
        config.load(tmp_path)
    p = write(tmp_path, "")
    p.write_bytes(b"\xff\xfe = 1")
    with pytest.raises(ConfigError, match="config"):
        config.load(p)
