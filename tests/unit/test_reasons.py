"""The owned drain-reason protocol."""

from hypothesis import given
from hypothesis import strategies as st

from airlock.slurm import reasons

words = st.from_regex(r"[A-Za-z0-9_.:-]{1,20}", fullmatch=True)
details = st.text(min_size=0, max_size=300)


@given(state=st.sampled_from(reasons.STATES), subject=words, detail=details)
def test_format_parse_round_trip(state, subject, detail):
    text = reasons.Reason(state, subject, detail).format()
    assert text.startswith(reasons.PREFIX) and len(text) <= reasons.MAX_LEN
    assert "\n" not in text and "\r" not in text
    parsed = reasons.parse(text)
    assert parsed is not None
    assert (parsed.state, parsed.subject) == (state, subject)
    if len(text) < reasons.MAX_LEN:
        assert parsed.detail == reasons.clean(detail)


@given(st.text(max_size=100))
def test_only_prefixed_reasons_are_owned(text):
    owned = reasons.is_owned(text)
    assert owned == (text.startswith("airlock:") and "\n" not in text)  # ours are one line
    assert (reasons.parse(text) is not None) == owned


def test_foreign_reasons_are_never_owned():
    for text in ("disk swap", "Prolog error", "Reboot ASAP", "Not responding", "NHC: ecc",
                 "Airlock: FAIL x", " airlock: FAIL x", "Action:Replace", ""):
        assert not reasons.is_owned(text), text
        assert reasons.parse(text) is None


def test_essential_word_fits_sinfo_default_width():
    text = reasons.failure("burnin", "gpu3 12 mismatches").format()
    assert text[:20] == "airlock: FAIL burnin"


def test_failure_check_names_are_sanitised():
    assert reasons.failure("bad name;rm", "x").subject == "bad_name_rm"
    assert reasons.failure("", "x").subject == "x"


def test_a_reason_is_one_line_of_at_most_220_characters_without_control_characters():
    """docs/guide.md, "The reason format". The round trip above draws its details at random
    and rarely one long enough to be cut: this one always is, and carries the control
    characters a terminal or Slurm's one-line output would choke on."""
    hostile = "gpu3\x00 bad\x1b[31m red\x7f\r\nsecond line\t" + "x" * 1000
    text = reasons.failure("burnin", hostile).format()
    assert len(text) == reasons.MAX_LEN == 220
    assert text.endswith("...") and text.startswith("airlock: FAIL burnin gpu3 bad [31m red ")
    assert not any(ord(c) < 0x20 or c == "\x7f" for c in text), repr(text)
