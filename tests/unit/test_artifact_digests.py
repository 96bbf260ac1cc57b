"""scripts/artifact_digests.py's stable digest: what varies between two runs of the same code
(wall-clock times, stat keys) is masked, and nothing else."""

import importlib.util
import json

from tests.tiny import ROOT

_spec = importlib.util.spec_from_file_location("artifact_digests",
                                               ROOT / "scripts" / "artifact_digests.py")
digests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(digests)

CLAIM = ("| inference is slower than the backbone | higher latency | {ms} ms per token against "
         "{bb} ({x}x at K = 4; FLOPs 6.54x); rounds {r} | holds |")


def test_the_claims_tables_latency_row_is_masked_but_not_its_flops():
    one = CLAIM.format(ms="4.3", bb="1.77", x="2.43", r="2.63-5.05 against 1.46-2.48")
    two = CLAIM.format(ms="11.6", bb="6.26", x="1.86", r="10.8-43.3 against 6.05-7.34")
    assert digests._report_untimed(one) == digests._report_untimed(two)
    assert "FLOPs 6.54x" in digests._report_untimed(one)
    flops = CLAIM.format(ms="4.3", bb="1.77", x="2.43", r="1-2 against 1-2")
    assert digests._report_untimed(flops) != digests._report_untimed(
        flops.replace("FLOPs 6.54x", "FLOPs 6.55x"))


def test_the_timed_claims_verdict_and_tally_are_masked_and_the_other_claims_are_not():
    """Its verdict follows the timing rounds (under load the rounds overlap and it reads
    'cannot decide'), as does the tally that counts it; another claim's verdict is a result."""
    row = CLAIM.format(ms="4.3", bb="1.77", x="2.43", r="2.63-5.05 against 1.46-2.48")
    row += " slower by the rounds' ranges | 8B | 42k |"
    undecided = row.replace("| holds | slower by the rounds' ranges |",
                            "| the design cannot decide at this scale | the rounds overlap |")
    assert digests._report_untimed(row) == digests._report_untimed(undecided)
    tally = "- Of the paper's 5 claims at this run's scale, {}. ([evidence](#paper-claims))"
    assert len({digests._report_untimed(tally.format(t)) for t in (
        "3 do not hold, 1 the design cannot decide, 1 holds (holding: inference is slower "
        "than the backbone)", "3 do not hold, 2 the design cannot decide")}) == 1
    other = "| l* near the embedding | layer 3 | layer 1 | holds | why | 8B | 42k |"
    assert digests._report_untimed(other) != digests._report_untimed(
        other.replace("| holds |", "| does not hold |"))


def test_the_reports_sentences_on_the_order_of_times_are_masked():
    pace = ("DiHAL at K = 4 generates at 1.2 ms per token against the backbone's 0.9 (1.3x the "
            "backbone's time: {}; a cached decode); its bridge has 93,344 parameters.")
    assert digests._report_untimed(pace.format("slower")) == digests._report_untimed(
        pace.format("faster"))
    assert "93,344 parameters" in digests._report_untimed(pace.format("slower"))
    order = "DiHAL's time per token over K = 1, 2, 4: {}"
    assert digests._report_untimed(order.format("rises with K.")) == digests._report_untimed(
        order.format("falls from K = 2 to 4, within the spread of the rounds."))


def test_the_evals_order_of_times_in_k_is_masked_in_its_manifest(tmp_path):
    """A verdict on the measured times (inversions appear under load)."""
    def manifest(inversions: list) -> str:
        path = tmp_path / "manifest.json"
        path.write_text(json.dumps({"info": {"cost": {"n": 4, "order_in_k": {
            "K": [1, 2, 4], "inversions": inversions, "monotone": not inversions}}}}))
        return digests.stable_digest(path, {})

    assert manifest([]) == manifest([[2, 4]])


def _cache(path, stat: str, sha: str):
    path.write_text(json.dumps({"files": {"/m/config.json": {stat: sha}}}))
    return digests.stable_digest(path, {})


def test_a_model_caches_digests_are_compared_without_their_stat_keys(tmp_path):
    f = tmp_path / "folder-digests.json"
    assert _cache(f, "711:1:1:5", "ab") == _cache(f, "711:2:2:6", "ab")
    assert _cache(f, "711:1:1:5", "ab") != _cache(f, "711:1:1:5", "cd")
