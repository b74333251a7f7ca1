"""Whether a process lives, for tests that check nothing outlived a kill (a zombie is dead)."""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][:1] != "Z"
    except FileNotFoundError:
        return False
