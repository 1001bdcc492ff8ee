"""partita's client ignores metadata whose leader epoch went backwards (KIP-320)."""

from __future__ import annotations

from partita.client.cluster import TopicInfo, _keep_newer_leaders


def test_an_older_epoch_does_not_replace_a_newer_leader() -> None:
    known = TopicInfo("t", 0, {0: 2, 1: 3}, {0: [1, 2], 1: [3, 1]}, {0: 5, 1: 1})
    stale = TopicInfo("t", 0, {0: 1, 1: 1}, {0: [1, 2], 1: [3, 1]}, {0: 4, 1: 2})
    _keep_newer_leaders(stale, known)
    assert stale.leaders == {0: 2, 1: 1}  # partition 0 keeps epoch 5's leader
    assert stale.epochs == {0: 5, 1: 2}


def test_unknown_epochs_are_taken_as_they_come() -> None:
    known = TopicInfo("t", 0, {0: 2}, {0: [1, 2]}, {0: 5})
    fresh = TopicInfo("t", 0, {0: 1}, {0: [1, 2]}, {0: -1})
    _keep_newer_leaders(fresh, known)
    assert fresh.leaders == {0: 1}
