"""`airlock recover` from the command line: dry run on the real cluster, one-line errors, the
systemd unit template."""

from __future__ import annotations

import os
import subprocess
import sys

from airlock.admin.render import systemd_unit


def test_systemd_unit_template_variables():
    unit = systemd_unit("/opt/airlock/bin/airlock", "/etc/airlock/airlock.toml", user="slurm",
                        interval=15)
    assert "ExecStart=/opt/airlock/bin/airlock recover --interval 15" in unit
    assert "Environment=AIRLOCK_CONFIG=/etc/airlock/airlock.toml" in unit
    assert "User=slurm" in unit and "[Install]" in unit
    assert "User=root" in systemd_unit("/usr/bin/airlock", "/etc/airlock/airlock.toml")


def test_bad_recovery_config_is_one_line(tmp_path):
    conf = tmp_path / "airlock.toml"
    conf.write_text('[recovery]\nprovider = "gcp"\n')
    p = subprocess.run([sys.executable, "-m", "airlock", "recover", "--once"],
                       env=dict(os.environ, AIRLOCK_CONFIG=str(conf)), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "provider: must be one of" in p.stderr




def test_history_with_an_empty_node_name_is_refused(tmp_path):
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'[recovery]\ndb = "{tmp_path / "recovery.db"}"\n')
    p = subprocess.run([sys.executable, "-m", "airlock", "recover", "--history", ""],
                       env=dict(os.environ, AIRLOCK_CONFIG=str(conf)), capture_output=True,
                       text=True, timeout=30)  # the service loop would run into the timeout
    assert p.returncode == 2 and p.stderr.strip() == "airlock: --history: needs a node name"
    assert p.stdout == "" and not (tmp_path / "recovery.db").exists()
