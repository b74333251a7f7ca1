"""The on-demand check's Slurm maintenance reservation: the targets' isolation and the lock
between on-demand runs (slurmctld refuses a second reservation of the same name, whichever
host asks). Its Duration bounds the damage if the run dies."""

from __future__ import annotations

import getpass
import sys

from airlock.errors import AirlockError, ReservationExists, SlurmError
from airlock.slurm.client import Slurm, collect


class Busy(AirlockError):
    """Another on-demand check holds the reservation (airlock.serve.checks.EXIT_BUSY)."""

    exit_code = 4


class Reservation:
    def __init__(self, slurm: Slurm, name: str):
        self.slurm = slurm
        self.name = name
        self.active = False

    def create(self, nodes: list[str], minutes: int) -> None:
        try:
            self.slurm.create_reservation(
                self.name, f"Nodes={collect(nodes)}", "StartTime=now",
                f"Duration={max(minutes, 1)}", f"Users={getpass.getuser()}",
                "Flags=MAINT,IGNORE_JOBS")
        except ReservationExists:
            raise Busy(f"another on-demand check is running (Slurm reservation {self.name} "
                       "exists); wait for it, or `scontrol delete "
                       f"ReservationName={self.name}` if it is stale") from None
        self.active = True

    def shrink(self, nodes: list[str]) -> None:
        if nodes:
            self.slurm.scontrol("update", f"ReservationName={self.name}",
                                f"Nodes={collect(nodes)}")

    def delete(self) -> None:
        if self.active:
            try:
                self.slurm.scontrol("delete", f"ReservationName={self.name}")
            except SlurmError as exc:
                print(f"airlock: could not delete reservation {self.name}: {exc}",
                      file=sys.stderr)
            self.active = False
