"""Providers against real parts: the http provider against a server on loopback, aws-hyperpod
through botocore's Stubber (every request validated against botocore's SageMaker model) and the
command provider with a real executable. hyperpod-slurm and slurm-power against real Slurm are in
tests/cluster/test_recovery_providers.py."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from airlock.config.sections.recovery import HttpSettings
from airlock.dev.cloud import FakeCloud
from airlock.errors import ConfigError
from airlock.recovery import providers as pv
from airlock.recovery.providers.aws_hyperpod import HyperpodProvider
from airlock.recovery.providers.http import HttpProvider


@pytest.fixture
def cloud():
    c = FakeCloud().start()
    yield c
    c.stop()


def http(cloud, tmp_path, record=None, **kw):
    token = tmp_path / "token"
    token.write_text(cloud.token + "\n")
    token.chmod(0o600)  # the provider refuses a token file others can read
    s = HttpSettings(url=cloud.url, token_file=str(token), timeout=0.5, retries=2, backoff=0.01,
                     backoff_max=0.5, **kw)
    return HttpProvider(s, record or (lambda *a: None))


def t(node="gpu1", rid="airlock-7-replace-gpu1"):
    return pv.ActionTarget(node, rid, f"airlock: recover replace {rid}")


def test_http_issued_idempotent_and_lookup(cloud, tmp_path):
    p = http(cloud, tmp_path)
    assert p.submit("replace", [t()])["gpu1"].status == pv.ISSUED
    assert p.submit("replace", [t()])["gpu1"].status == pv.ISSUED
    assert sum(1 for e in cloud.posts() if e.get("executed")) == 1  # same request id, done once
    assert p.lookup("replace", t(), None) is True
    assert p.lookup("replace", t(rid="airlock-8-replace-gpu1"), None) is False
    assert p.session.verify is True  # TLS verification on by default
    assert cloud.token not in repr(p)


def test_http_retries_exhausted_is_an_error_and_recorded(cloud, tmp_path):
    events = []
    p = http(cloud, tmp_path, record=lambda n, e, d: events.append((n, e, d)))
    cloud.script = [503, 502, 500]
    res = p.submit("reboot", [t()])["gpu1"]
    assert res.status == pv.ERROR and "HTTP 500" in res.message
    assert [e for _n, e, _d in events] == ["api_retry", "api_retry", "api_error"]
    assert len(cloud.posts()) == 3


def test_http_wrong_token_is_a_refusal_without_leaking_it(cloud, tmp_path):
    p = http(cloud, tmp_path)
    p.session.headers["Authorization"] = "Bearer wrong-token-123"
    res = p.submit("replace", [t()])["gpu1"]
    assert res.status == pv.REFUSED and "401" in res.message and "wrong-token" not in res.message


def test_http_connection_refused_is_retried_then_error(tmp_path):
    s = HttpSettings(url="http://127.0.0.1:9", timeout=0.5, retries=1, backoff=0.01)
    res = HttpProvider(s, lambda *a: None).submit("replace", [t()])["gpu1"]
    assert res.status == pv.ERROR and "connection error" in res.message


def test_http_token_sources(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="token_file .*missing"):
        HttpProvider(HttpSettings(url="http://127.0.0.1:9",
                                  token_file=str(tmp_path / "missing")), None)
    monkeypatch.delenv("AIRLOCK_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"\$AIRLOCK_TEST_TOKEN is not set"):
        HttpProvider(HttpSettings(url="http://127.0.0.1:9", token_env="AIRLOCK_TEST_TOKEN"), None)
    monkeypatch.setenv("AIRLOCK_TEST_TOKEN", "tok-from-env")
    p = HttpProvider(HttpSettings(url="http://127.0.0.1:9", token_env="AIRLOCK_TEST_TOKEN"), None)
    assert p.session.headers["Authorization"] == "Bearer tok-from-env"


# --- aws-hyperpod through botocore's own model -------------------------------------------------
def hyperpod(nodes: int):
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x")
    stub = Stubber(client)
    summaries = [{"InstanceGroupName": "gpu", "InstanceId": f"i-{i:017x}",
                  "InstanceType": "ml.p5.48xlarge", "LaunchTime": "2026-01-01T00:00:00Z",
                  "InstanceStatus": {"Status": "Running"},
                  "PrivateDnsHostname": f"ip-10-0-0-{i}.ec2.internal"} for i in range(nodes)]
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": summaries[:20],
                                             "NextToken": "p2"}, {"ClusterName": "ml"})
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": summaries[20:]},
                      {"ClusterName": "ml", "NextToken": "p2"})
    return HyperpodProvider(client, "ml"), stub


def test_hyperpod_batches_of_25_and_per_node_errors():
    prov, stub = hyperpod(30)
    ids = [f"i-{i:017x}" for i in range(30)]
    stub.add_response("batch_replace_cluster_nodes",
                      {"Successful": ids[:24], "Failed": [
                          {"NodeId": ids[24], "ErrorCode": "InstanceIdInUse",
                           "Message": "node is already being replaced"}]},
                      {"ClusterName": "ml", "NodeIds": ids[:25]})
    stub.add_response("batch_replace_cluster_nodes",
                      {"Successful": ids[25:29], "Failed": [
                          {"NodeId": ids[29], "ErrorCode": "InternalServerError",
                           "Message": "try again"}]},
                      {"ClusterName": "ml", "NodeIds": ids[25:]})
    targets = [t(f"ip-10-0-0-{i}", f"airlock-{i}-replace") for i in range(30)]
    with stub:
        res = prov.submit("replace", targets + [t("ip-10-9-9-9", "airlock-99-replace")])
    stub.assert_no_pending_responses()
    assert sum(r.status == pv.ISSUED for r in res.values()) == 28
    assert res["ip-10-0-0-24"].status == pv.REFUSED
    assert "already being" in res["ip-10-0-0-24"].message
    assert res["ip-10-0-0-29"].status == pv.ERROR
    unknown = res["ip-10-9-9-9"]
    assert unknown.status == pv.REFUSED and "no HyperPod node" in unknown.message


def test_hyperpod_reboot_and_lookup_after_restart():
    prov, stub = hyperpod(2)
    stub.add_response("batch_reboot_cluster_nodes", {"Successful": ["i-00000000000000001"]},
                      {"ClusterName": "ml", "NodeIds": ["i-00000000000000001"]})
    stub.add_response("describe_cluster_node", {"NodeDetails": {
        "InstanceId": "i-00000000000000001", "InstanceStatus": {"Status": "Pending"}}},
        {"ClusterName": "ml", "NodeId": "i-00000000000000001"})
    stub.add_client_error("batch_reboot_cluster_nodes", "ThrottlingException", "slow down",
                          expected_params={"ClusterName": "ml",
                                           "NodeIds": ["i-00000000000000000"]})
    with stub:
        assert prov.submit("reboot", [t("ip-10-0-0-1")])["ip-10-0-0-1"].status == pv.ISSUED
        assert prov.lookup("reboot", t("ip-10-0-0-1"), None) is True
        err = prov.submit("reboot", [t("ip-10-0-0-0")])["ip-10-0-0-0"]
    assert err.status == pv.ERROR and "ThrottlingException" in err.message


# --- command -----------------------------------------------------------------------------------
def test_command_provider_argv_and_exit_codes(tmp_path):
    log = tmp_path / "calls"
    exe = tmp_path / "cloudctl"
    exe.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n"
                   "case \"$2\" in bad*) echo 'quota exceeded' >&2; exit 3;; "
                   "flaky*) echo 'api down' >&2; exit 1;; esac\n"
                   "if [ \"$1\" = status ]; then grep -q \"^replace $2 --request-id $4\" "
                   + str(log) + "; exit $?; fi\nexit 0\n")
    exe.chmod(0o755)
    p = pv.Command(str(exe), 5)
    res = p.submit("replace", [t("gpu1"), t("bad1"), t("flaky1"), t("x; rm -rf /")])
    assert res["gpu1"].status == pv.ISSUED
    assert res["bad1"] == pv.Result(pv.REFUSED, "quota exceeded")
    assert res["flaky1"] == pv.Result(pv.ERROR, "api down")
    assert "replace x; rm -rf / --request-id" in log.read_text()  # one argv item, no shell
    assert p.lookup("replace", t("gpu1"), None) is True
    assert p.lookup("replace", t("gpu2"), None) is False
    with pytest.raises(ConfigError, match="not an executable"):
        pv.Command(str(tmp_path / "calls"), 5)




def test_the_token_file_is_judged_by_the_file_that_was_read(tmp_path, monkeypatch):
    """Issue 17: the token file was checked by path (stat), then opened by path: what was
    checked need not be what was read. Now it is opened once and the open file is judged
    (fstat). Shown here by a path lookup that lies: only the open file tells the truth."""
    import os

    from airlock.recovery.providers import http as http_mod

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o644)  # others can read it: must be refused
    real_stat = os.stat

    def lying_stat(path, *a, **kw):  # a swap between the check and the open, say
        st = real_stat(path, *a, **kw)
        if str(path) == str(token):
            return os.stat_result((st.st_mode & ~0o077, *tuple(st)[1:]))
        return st

    monkeypatch.setattr(os, "stat", lying_stat)
    with pytest.raises(ConfigError, match="mode 0644 lets group or others read it"):
        http_mod.read_token(HttpSettings(url="http://127.0.0.1:9", token_file=str(token)))
