"""The `aws-hyperpod` provider: SageMaker BatchRebootClusterNodes / BatchReplaceClusterNodes.

Slurm node names on HyperPod are the instances' private DNS host names (ip-10-1-2-3); the
mapping to HyperPod node ids comes from ListClusterNodes (PrivateDnsHostname, or
DescribeClusterNode where a summary lacks it), cached and refreshed when a name is missing, or
from [recovery.aws_hyperpod] node_ids. At most 25 node ids go in one call; the per-node Failed
entries become per-node refusals (or errors, for throttling and internal errors).
"""

from __future__ import annotations

from airlock.errors import AirlockError, ConfigError
from airlock.recovery.machine import Obs
from airlock.recovery.providers.base import (
    ERROR,
    ISSUED,
    REFUSED,
    ActionTarget,
    Provider,
    Recorder,
    Result,
)

BATCH = 25
RETRYABLE_CODES = frozenset({"InternalServerError", "ThrottlingException", "ServiceUnavailable",
                             "InternalFailure"})
OPERATIONS = {"reboot": "batch_reboot_cluster_nodes", "replace": "batch_replace_cluster_nodes"}


class HyperpodProvider(Provider):
    name = "aws-hyperpod"
    actions = ("reboot", "replace")

    def __init__(self, client, cluster: str, node_ids: dict[str, str] | None = None,
                 record: Recorder | None = None):
        self.client = client
        self.cluster = cluster
        self.static = dict(node_ids or {})
        self.ids: dict[str, str] = {}
        self.record = record or (lambda *_a: None)

    @classmethod
    def from_settings(cls, settings, record: Recorder) -> HyperpodProvider:
        try:
            import boto3
        except ImportError:
            raise ConfigError("provider aws-hyperpod needs boto3 (pip install "
                              "'slurm-airlock[aws]')") from None
        kwargs = {"region_name": settings.region} if settings.region else {}
        return cls(boto3.client("sagemaker", **kwargs), settings.cluster, settings.node_ids,
                   record)

    # --- names -> node ids -----------------------------------------------------------------
    def refresh(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        ids: dict[str, str] = {}
        try:
            for page in self.client.get_paginator("list_cluster_nodes").paginate(
                    ClusterName=self.cluster):
                for s in page.get("ClusterNodeSummaries", []):
                    host = s.get("PrivateDnsHostname")
                    if not host:
                        host = self.client.describe_cluster_node(
                            ClusterName=self.cluster, NodeId=s["InstanceId"]
                        )["NodeDetails"].get("PrivateDnsHostname", "")
                    if host:
                        ids[host.split(".")[0]] = s["InstanceId"]
        except (BotoCoreError, ClientError) as exc:
            raise AirlockError(f"aws-hyperpod: listing cluster {self.cluster}: {exc}") from None
        self.ids = ids

    def node_id(self, node: str, may_refresh: bool = True) -> str | None:
        if node in self.static:
            return self.static[node]
        if node not in self.ids and may_refresh:
            self.refresh()
        return self.ids.get(node)

    # --- actions ---------------------------------------------------------------------------
    def submit(self, action: str, targets: list[ActionTarget]) -> dict[str, Result]:
        from botocore.exceptions import BotoCoreError, ClientError

        out: dict[str, Result] = {}
        by_id: dict[str, str] = {}
        refreshed = False  # one ListClusterNodes walk per call, however many names are new
        for t in targets:
            try:
                fresh = not refreshed and t.node not in self.ids and t.node not in self.static
                nid = self.node_id(t.node, may_refresh=not refreshed)
                refreshed = refreshed or fresh
            except AirlockError as exc:
                out[t.node] = Result(ERROR, str(exc))
                continue
            if nid is None:
                out[t.node] = Result(REFUSED, f"no HyperPod node in cluster {self.cluster} "
                                              f"has host name {t.node}")
            else:
                by_id[nid] = t.node
        ids = list(by_id)
        call = getattr(self.client, OPERATIONS[action])
        for i in range(0, len(ids), BATCH):
            chunk = ids[i:i + BATCH]
            try:
                resp = call(ClusterName=self.cluster, NodeIds=chunk)
            except (BotoCoreError, ClientError) as exc:
                for nid in chunk:
                    self.record(by_id[nid], "api_error", f"{OPERATIONS[action]}: {exc}")
                    out[by_id[nid]] = Result(ERROR, f"{OPERATIONS[action]}: {exc}"[:300])
                continue
            for nid in resp.get("Successful", []):
                if nid in by_id:
                    out[by_id[nid]] = Result(ISSUED, f"{nid} accepted")
            for f in resp.get("Failed", []):
                nid = f.get("NodeId", "")
                if nid not in by_id:
                    continue
                code, msg = f.get("ErrorCode", "?"), f.get("Message", "")
                status = ERROR if code in RETRYABLE_CODES else REFUSED
                out[by_id[nid]] = Result(status, f"{nid}: {code}: {msg}"[:300])
            for nid in chunk:
                out.setdefault(by_id[nid], Result(ERROR, f"{nid}: not in the API's answer"))
        return out

    def lookup(self, action: str, target: ActionTarget, obs: Obs | None) -> bool:
        """BatchReboot/Replace take no idempotency token: the instance's status says whether
        our request went through (anything but Running), so a restart does not send it twice."""
        from botocore.exceptions import BotoCoreError, ClientError

        nid = self.static.get(target.node) or self.ids.get(target.node)
        if nid is None:
            try:
                nid = self.node_id(target.node)
            except AirlockError:
                return False
        if nid is None:
            return False
        try:
            d = self.client.describe_cluster_node(ClusterName=self.cluster, NodeId=nid)
        except ClientError as exc:
            return exc.response.get("Error", {}).get("Code") == "ResourceNotFound"
        except BotoCoreError:
            return False
        return d["NodeDetails"].get("InstanceStatus", {}).get("Status") != "Running"
