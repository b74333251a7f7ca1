"""Providers against real parts: the http provider against a server on loopback, aws-hyperpod
through botocore's Stubber (every request validated against botocore's SageMaker model), the
command provider with a real executable, and hyperpod-slurm / slurm-power against real Slurm."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from airlock.dev.cloud import FakeCloud
from airlock.recovery import providers as pv
from airlock.recovery.machine import Obs
from airlock.recovery.providers.aws_hyperpod import HyperpodProvider
from airlock.recovery.providers.http import HttpProvider
from airlock.recovery.settings import HttpSettings


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


# --- against the real Slurm test cluster -------------------------------------------------------
@pytest.mark.cluster
def test_hyperpod_slurm_reason_exact_and_slurm_power_refuses_non_cloud(cluster_factory):
    cluster = cluster_factory(nodes=["node1", "node2"], wait=True,
                              airlock={"registration": {"level": "quick"}})
    cluster.wait(lambda: not cluster.node("node1").drained, 30, "node1 resumed")
    hp = pv.HyperpodSlurm(cluster.slurm)
    assert hp.submit("replace", [t("node1")])["node1"].status == pv.ISSUED
    n = cluster.node("node1")
    assert n.reason == "Action:Replace" and "FAIL" in n.state_text
    assert hp.lookup("replace", t("node1"), Obs.from_node(n)) and hp.owns_reason(n.reason)
    power = pv.SlurmPower(cluster.slurm)
    res = power.submit("replace", [t("node2")])["node2"]
    assert res.status == pv.REFUSED and "State=CLOUD" in res.message
    assert not cluster.node("node2").reason.startswith("airlock: recover")
