"""The landing guard's pure rules: marks set, renewed, kept, expired, cleared on cool-down and by the cap;
foreign taints never touched (table, then properties)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.actions.guard.decide import (
    Action,
    Change,
    GuardDecision,
    GuardedNode,
    apply_change,
    decide,
    pool_cap,
    release,
)
from rebalancer.domain.guard_marks import GUARD_KEY, Foreign, Mark, MarkReason, Orphan, read_mark, rfc3339
from rebalancer.domain.model import Taint
from rebalancer.domain.settings.guard import LandingGuardSettings, PoolGuardSettings
from rebalancer.planning.plan import NodeClass

NOW = 1_790_000_000.0
ME = "rebalancer-a"
HOT, COLD, NORMAL, UNKNOWN = NodeClass.HOT, NodeClass.COLD, NodeClass.NORMAL, NodeClass.UNKNOWN
FOREIGN_TAINT = Taint("dedicated", "gpu", "NoSchedule")


def guard(fraction: float = 1.0, effect: str = "PreferNoSchedule", pool: str = "p") -> LandingGuardSettings:
    return LandingGuardSettings.model_validate(
        {"pools": [{"pool": pool, "effect": effect, "holdAfterRelief": "10m", "markTtl": "15m",
                    "maxMarkedFraction": fraction}]}
    )  # fmt: skip


def marked(
    name: str,
    node_class: NodeClass,
    reason: MarkReason,
    expires: float,
    *,
    owner: str = ME,
    relieved: bool = False,
    extra: tuple[Taint, ...] = (FOREIGN_TAINT,),
    effect: str = "PreferNoSchedule",
    pool: str = "p",
) -> GuardedNode:
    mark = Mark(owner, effect, reason, expires)
    return GuardedNode(name, pool, node_class, relieved, (*extra, mark.taint()), mark.annotation())


def plain(name: str, node_class: NodeClass, relieved: bool = False, usage: float | None = None) -> GuardedNode:
    return GuardedNode(name, "p", node_class, relieved, (FOREIGN_TAINT,), None, usage)


def only(decision: GuardDecision, node: str) -> Change | None:
    found = [c for c in decision.changes if c.node == node]
    assert len(found) <= 1
    return found[0] if found else None


FILLER = tuple(plain(f"z{i}", NORMAL) for i in range(4))  # cool nodes, so that the cap is not the point


@pytest.mark.parametrize(
    ("node", "action", "reason", "expires"),
    [
        pytest.param(plain("n", HOT), Action.SET, "hot", NOW + 900, id="hot: set, expires after markTtl"),
        pytest.param(plain("n", NORMAL, relieved=True), Action.SET, "relieved", NOW + 600, id="relieved: hold"),
        pytest.param(plain("n", HOT, relieved=True), Action.SET, "relieved", NOW + 900, id="hot and relieved"),
        pytest.param(plain("n", NORMAL), None, None, None, id="cool, unmarked: nothing"),
        pytest.param(plain("n", UNKNOWN), None, None, None, id="unknown: never set on missing data"),
        pytest.param(marked("n", HOT, MarkReason.HOT, NOW + 800), None, None, None, id="hot, fresh mark: no write"),
        pytest.param(
            marked("n", HOT, MarkReason.HOT, NOW + 300),
            Action.REFRESH,
            "hot",
            NOW + 900,
            id="hot, half of markTtl gone: renewed",
        ),
        pytest.param(
            marked("n", HOT, MarkReason.HOT, NOW - 1), Action.REFRESH, "hot", NOW + 900, id="hot, expired: renewed"
        ),
        pytest.param(marked("n", NORMAL, MarkReason.HOT, NOW + 800), Action.CLEAR, "cooled", None, id="cooled"),
        pytest.param(marked("n", COLD, MarkReason.HOT, NOW + 800), Action.CLEAR, "cooled", None, id="cold"),
        pytest.param(
            marked("n", UNKNOWN, MarkReason.HOT, NOW + 800), None, None, None, id="unknown: kept until expiry"
        ),
        pytest.param(
            marked("n", UNKNOWN, MarkReason.HOT, NOW), Action.CLEAR, "expired", None, id="unknown, expired: cleared"
        ),
        pytest.param(marked("n", NORMAL, MarkReason.RELIEVED, NOW + 60), None, None, None, id="relieved: hold"),
        pytest.param(marked("n", NORMAL, MarkReason.RELIEVED, NOW - 5), Action.CLEAR, "expired", None, id="hold over"),
        pytest.param(
            marked("n", NORMAL, MarkReason.RELIEVED, NOW + 60, relieved=True),
            Action.REFRESH,
            "relieved",
            NOW + 600,
            id="relieved again: hold restarts",
        ),
        pytest.param(
            marked("n", HOT, MarkReason.RELIEVED, NOW + 500), None, None, None, id="hot during the hold: stays relieved"
        ),
        pytest.param(
            marked("n", HOT, MarkReason.HOT, NOW + 800, owner="crashed"),
            Action.REFRESH,
            "hot",
            NOW + 900,
            id="another instance's mark on a hot node: taken over",
        ),
        pytest.param(
            marked("n", NORMAL, MarkReason.RELIEVED, NOW + 60, owner="crashed"),
            None,
            None,
            None,
            id="another instance's hold is honoured",
        ),
        pytest.param(
            marked("n", NORMAL, MarkReason.RELIEVED, NOW + 60, effect="NoSchedule"),
            Action.REFRESH,
            "relieved",
            NOW + 60,
            id="effect changed in the policy: rewritten",
        ),
        pytest.param(
            marked("n", NORMAL, MarkReason.RELIEVED, NOW + 86_400),
            Action.REFRESH,
            "relieved",
            NOW + 900,
            id="holdAfterRelief shortened since the hold was set: cut to the longest a hold lasts now (markTtl)",
        ),
        pytest.param(
            marked("n", HOT, MarkReason.HOT, NOW + 86_400),
            Action.REFRESH,
            "hot",
            NOW + 900,
            id="markTtl shortened since: a hot node's mark cut to the new ttl",
        ),
        pytest.param(
            marked("n", UNKNOWN, MarkReason.HOT, NOW + 86_400),
            Action.REFRESH,
            "hot",
            NOW + 900,
            id="markTtl shortened, usage unknown: kept, but no longer than the new ttl",
        ),
        pytest.param(
            marked("n", NORMAL, MarkReason.RELIEVED, NOW + 900 + 50),
            None,
            None,
            None,
            id="a hold up to a minute too long: another instance's clock ahead, left",
        ),
        pytest.param(
            marked("n", NORMAL, MarkReason.RELIEVED, NOW + 900 + 61),
            Action.REFRESH,
            "relieved",
            NOW + 900,
            id="a hold over a minute too long: cut",
        ),
        pytest.param(
            GuardedNode(
                "n",
                "p",
                NORMAL,
                False,
                (FOREIGN_TAINT,),
                Mark(ME, "PreferNoSchedule", MarkReason.HOT, NOW + 60).annotation(),
            ),
            Action.CLEAR,
            "taint-removed",
            None,
            id="annotation left without its taint",
        ),
        pytest.param(
            GuardedNode("n", "p", HOT, False, (Taint(GUARD_KEY, "mine", "NoSchedule"),), None),
            None,
            None,
            None,
            id="the key without the annotation: foreign, nothing added",
        ),
        pytest.param(
            GuardedNode("n", "p", NORMAL, False, (Taint(GUARD_KEY, "hot", "PreferNoSchedule"),), "{bad"),
            None,
            None,
            None,
            id="unreadable annotation: foreign",
        ),
    ],
)
def test_rules(node: GuardedNode, action: Action | None, reason: str | None, expires: float | None) -> None:
    change = only(decide((node, *FILLER), guard(), ME, NOW), "n")
    if action is None:
        assert change is None
        return
    assert change is not None
    assert (change.action, change.reason) == (action, reason)
    if expires is None:
        assert change.mark is None
    else:
        assert change.mark is not None and change.mark.expires == expires and change.mark.owner == ME


@pytest.mark.parametrize(
    ("node_class", "written"),
    [
        (HOT, [(0, Action.SET), (8, Action.REFRESH)]),
        (NORMAL, [(0, Action.SET), (3, Action.REFRESH), (11, Action.REFRESH)]),
    ],
    ids=["hot when relieved", "relieved, then hot"],
)
def test_a_relieved_node_that_stays_hot_is_written_again_only_to_renew(
    node_class: NodeClass, written: list[tuple[int, Action]]
) -> None:
    """A node relieved, then hot in the cycles a minute apart that follow, keeps its relieved mark, which
    the hot node stretches to markTtl (15m, longer than holdAfterRelief, 10m): it is written again only
    once half of markTtl is left, not in every cycle."""
    node = plain("n", node_class, relieved=True)
    writes = []
    for minute in range(16):
        change = only(decide((node, *FILLER), guard(), ME, NOW + 60 * minute), "n")
        if change is not None:
            assert change.reason == "relieved"
            writes.append((minute, change.action))
            edit = apply_change(change, node.taints, node.annotation)
            assert edit is not None
            node = GuardedNode("n", "p", node.node_class, node.relieved, edit.taints, edit.annotation)
        node = GuardedNode("n", "p", HOT, False, node.taints, node.annotation)
    assert writes == written


def test_effect_no_schedule_and_the_edit_keeps_foreign_taints() -> None:
    node = GuardedNode("n", "p", HOT, False, (FOREIGN_TAINT, Taint("a", "", "NoExecute")), None)
    change = only(decide((node, *FILLER), guard(effect="NoSchedule"), ME, NOW), "n")
    assert change is not None
    edit = apply_change(change, node.taints, node.annotation)
    assert edit is not None
    assert edit.taints == (FOREIGN_TAINT, Taint("a", "", "NoExecute"), Taint(GUARD_KEY, "hot", "NoSchedule"))
    assert edit.annotation is not None
    assert read_mark(edit.taints, edit.annotation) == Mark(ME, "NoSchedule", MarkReason.HOT, NOW + 900)
    assert f'"expires":"{rfc3339(NOW + 900)}"' in edit.annotation
    cleared = apply_change(Change("n", "p", Action.CLEAR, "cooled", None, change.mark), edit.taints, edit.annotation)
    assert cleared is not None and cleared.taints == node.taints and cleared.annotation is None


def test_a_change_is_not_made_on_a_node_changed_since() -> None:
    node = marked("n", NORMAL, MarkReason.HOT, NOW + 800)
    change = only(decide((node, *FILLER), guard(), ME, NOW), "n")
    assert change is not None and change.action is Action.CLEAR
    renewed = marked("n", HOT, MarkReason.HOT, NOW + 900, owner="other")
    assert apply_change(change, renewed.taints, renewed.annotation) is None
    foreign = (*node.taints, Taint(GUARD_KEY, "x", "NoSchedule"))
    assert apply_change(change, foreign, node.annotation) is None  # a second taint of the key appeared
    assert apply_change(change, (FOREIGN_TAINT,), None) is None  # already gone


def test_the_cap_marks_relieved_then_hottest_and_never_the_whole_pool() -> None:
    nodes = [plain("a", HOT, usage=90), plain("b", HOT, usage=95), plain("c", NORMAL, relieved=True), plain("d", HOT)]
    decision = decide(nodes, guard(fraction=0.5), ME, NOW)
    assert sorted(c.node for c in decision.changes) == ["b", "c"]
    assert {n.node for n in decision.notes if n.why.startswith("capped")} == {"a", "d"}
    everything = decide(nodes, guard(fraction=1.0), ME, NOW)
    assert len(everything.changes) == 3, "never all four nodes of the pool"
    assert pool_cap(guard(fraction=1.0).pools[0], 1) == 0
    off = decide([marked("a", HOT, MarkReason.HOT, NOW + 800), plain("b", HOT), *FILLER], guard(fraction=0), ME, NOW)
    assert [(c.node, c.reason) for c in off.changes] == [("a", "over-cap")], "fraction 0: every mark goes"


def test_the_cap_counts_only_nodes_that_take_pods_and_their_marks_go_first() -> None:
    """Two of four nodes cordoned or NotReady: a NoSchedule guard at fraction 1 marks one of the other two,
    never both (the replacements would have nowhere to go), and a mark on a cordoned node yields its room."""
    shut = [replace(plain("a", HOT, usage=99), takes_pods=False), replace(plain("b", HOT), takes_pods=False)]
    nodes = [*shut, plain("c", HOT, usage=90), plain("d", HOT, usage=80)]
    decision = decide(nodes, guard(fraction=1.0, effect="NoSchedule"), ME, NOW)
    assert [(c.node, c.action) for c in decision.changes] == [("c", Action.SET)]
    assert {n.node for n in decision.notes} == {"a", "b", "d"}
    drained = replace(marked("a", HOT, MarkReason.RELIEVED, NOW + 500), takes_pods=False)
    moved = decide([drained, plain("c", HOT), plain("d", NORMAL)], guard(fraction=0.5), ME, NOW)  # room: 1 of 2
    assert [(c.node, c.action, c.reason) for c in moved.changes] == [
        ("a", Action.CLEAR, "over-cap"),
        ("c", Action.SET, "hot"),
    ]
    assert decide(shut, guard(fraction=1.0), ME, NOW).changes == (), "a pool that takes no pods gets no mark"


def test_a_hotter_node_does_not_take_an_existing_mark_over_the_cap() -> None:
    existing = marked("a", HOT, MarkReason.HOT, NOW + 800)
    nodes = [GuardedNode("a", "p", HOT, False, existing.taints, existing.annotation, 80.0), plain("b", HOT, usage=95)]
    decision = decide([*nodes, plain("c", NORMAL)], guard(fraction=0.34), ME, NOW)  # cap: 1 of 3
    assert decision.changes == ()
    assert [(n.node, n.why) for n in decision.notes] == [("b", "capped: 1 of 3 node(s) may be marked")]
    relieved = decide([*nodes[:1], plain("b", HOT, relieved=True), plain("c", NORMAL)], guard(fraction=0.34), ME, NOW)
    assert [(c.node, c.action, c.reason) for c in relieved.changes] == [
        ("a", Action.CLEAR, "over-cap"),
        ("b", Action.SET, "relieved"),
    ], "a relieved node comes first"


def test_marks_over_the_cap_are_cleared_and_foreign_taints_of_the_key_count() -> None:
    nodes = [
        marked("a", NORMAL, MarkReason.RELIEVED, NOW + 60),
        marked("b", HOT, MarkReason.HOT, NOW + 800, extra=()),
        GuardedNode("c", "p", NORMAL, False, (Taint(GUARD_KEY, "", "NoSchedule"),), None),
        plain("d", NORMAL),
    ]
    decision = decide(nodes, guard(fraction=0.5), ME, NOW)  # room: 2, one taken by the foreign taint
    assert [(c.node, c.action, c.reason) for c in decision.changes] == [("b", Action.CLEAR, "over-cap")]


def test_a_pool_without_guard_keeps_no_mark_and_release_clears_only_its_owners() -> None:
    elsewhere = marked("x", HOT, MarkReason.HOT, NOW + 800, pool="q")
    assert [c.reason for c in decide([elsewhere], guard(), ME, NOW).changes] == ["guard-off"]
    nodes = [marked("a", HOT, MarkReason.HOT, NOW + 800), marked("b", HOT, MarkReason.HOT, NOW + 800, owner="new"),
             plain("c", HOT), GuardedNode("d", "p", HOT, False, (Taint(GUARD_KEY, "hot", "NoSchedule"),), None)]  # fmt: skip
    released = release(nodes, ME)
    assert [(c.node, c.reason) for c in released.changes] == [("a", "released")]


def test_read_mark_states() -> None:
    mark = Mark(ME, "NoSchedule", MarkReason.RELIEVED, NOW)
    assert read_mark((), None) is None
    assert read_mark((mark.taint(),), mark.annotation()) == mark
    assert read_mark((), mark.annotation()) == Orphan(mark)
    assert isinstance(read_mark((mark.taint(),), None), Foreign)
    assert isinstance(read_mark((Taint(GUARD_KEY, "hot", "PreferNoSchedule"),), mark.annotation()), Foreign)
    for bad in ('{"owner":"","effect":"NoSchedule","reason":"hot","expires":"2026-01-01T00:00:00Z"}',
                '{"owner":"a","effect":"NoExecute","reason":"hot","expires":"2026-01-01T00:00:00Z"}',
                '{"owner":"a","effect":"NoSchedule","reason":"warm","expires":"2026-01-01T00:00:00Z"}',
                '{"owner":"a","effect":"NoSchedule","reason":"hot","expires":"tomorrow"}', "[]", "null"):  # fmt: skip
        assert isinstance(read_mark((mark.taint(),), bad), Foreign), bad


def test_a_taint_of_the_key_with_another_value_than_the_annotation_says_is_left_alone() -> None:
    """`kubectl taint nodes N rebalancer.io/landing-guard=keep:PreferNoSchedule --overwrite` on a marked node
    replaces the mark's taint (the same key and effect): the annotation no longer proves the taint is
    rebalancer's, so it is neither cleared at the expiry nor counted as a mark."""
    mark = Mark(ME, "PreferNoSchedule", MarkReason.HOT, NOW - 1)
    overwritten = (FOREIGN_TAINT, Taint(GUARD_KEY, "keep", "PreferNoSchedule"))
    assert isinstance(read_mark(overwritten, mark.annotation()), Foreign)
    node = GuardedNode("n", "p", COLD, False, overwritten, mark.annotation())
    assert only(decide((node, *FILLER), guard(), ME, NOW), "n") is None
    assert release((node,), ME).changes == ()


@pytest.mark.parametrize("field", ["markTtl", "holdAfterRelief"])
def test_a_mark_lifetime_beyond_a_week_is_refused_naming_the_field(field: str) -> None:
    """A lifetime so long that a mark nobody renews would in effect never go (3000000d: past the year 9999,
    where writing the expiry failed in every cycle) is refused when the policy is read."""
    with pytest.raises(ValueError, match=f"{field}[\\s\\S]*3000000d is longer than 7d"):
        LandingGuardSettings.model_validate({"pools": [{"pool": "p", field: "3000000d"}]})
    week = LandingGuardSettings.model_validate({"pools": [{"pool": "p", field: "7d"}]}).pools[0]
    node = GuardedNode("n", "p", HOT, True)
    change = only(decide((node, *FILLER), LandingGuardSettings(pools=(week,)), ME, NOW), "n")
    assert change is not None and change.mark is not None and change.mark.expires <= NOW + 7 * 86400
    assert apply_change(change, (), None) is not None


def test_settings_reject_unknown_fields_and_repeated_pools() -> None:
    with pytest.raises(ValueError, match="repeated: p"):
        LandingGuardSettings.model_validate({"pools": [{"pool": "p"}, {"pool": "p"}]})
    with pytest.raises(ValueError, match="effect"):
        LandingGuardSettings.model_validate({"pools": [{"pool": "p", "effect": "NoExecute"}]})
    with pytest.raises(ValueError, match="holdAfterRelif"):
        LandingGuardSettings.model_validate({"pools": [{"pool": "p", "holdAfterRelif": "5m"}]})
    assert not LandingGuardSettings().enabled
    assert PoolGuardSettings(pool="p").effect == "PreferNoSchedule"


# -- properties ------------------------------------------------------------------------------------

FOREIGN_TAINTS = st.lists(
    st.builds(
        Taint,
        st.sampled_from(["dedicated", GUARD_KEY, "x"]),
        st.sampled_from(["", "a", "hot"]),
        st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    ),
    max_size=2,
    unique_by=lambda t: (t.key, t.effect),
)
MARKS = st.none() | st.builds(
    Mark, st.sampled_from([ME, "other"]), st.sampled_from(["PreferNoSchedule", "NoSchedule"]),
    st.sampled_from(list(MarkReason)), st.integers(-2000, 2000).map(lambda d: NOW + d),
)  # fmt: skip


@st.composite
def cluster_nodes(draw: st.DrawFn) -> list[GuardedNode]:
    out = []
    for i in range(draw(st.integers(1, 8))):
        taints = tuple(draw(FOREIGN_TAINTS))
        mark = draw(MARKS)
        annotation = None
        if mark is not None:
            annotation = mark.annotation()
            if draw(st.booleans()):  # the taint too, unless the drawn taints already hold the key (foreign)
                taints = (*taints, mark.taint())
        out.append(GuardedNode(f"n{i}", draw(st.sampled_from(["p", "q"])), draw(st.sampled_from(list(NodeClass))),
                               draw(st.booleans()), taints, annotation, draw(st.none() | st.floats(0, 200)),
                               takes_pods=draw(st.integers(0, 3)) > 0))  # fmt: skip
    return out


def _after(node: GuardedNode, decision: GuardDecision) -> GuardedNode:
    change = only(decision, node.name)
    if change is None:
        return node
    edit = apply_change(change, node.taints, node.annotation)
    assert edit is not None, "a change decided on a node must apply to that same node"
    return replace(node, relieved=False, taints=edit.taints, annotation=edit.annotation)


@settings(max_examples=300, deadline=None)
@given(cluster_nodes(), st.floats(0.0, 1.0))
def test_foreign_taints_are_never_changed_and_the_cap_holds(nodes: list[GuardedNode], fraction: float) -> None:
    policy = guard(fraction=fraction)
    decision = decide(nodes, policy, ME, NOW)
    after = [_after(n, decision) for n in nodes]
    for before, now in zip(nodes, after, strict=True):
        if isinstance(before.state, Foreign):
            assert now == before, "a node with a foreign taint of the key or annotation is never changed"
        assert [t for t in before.taints if t.key != GUARD_KEY] == [t for t in now.taints if t.key != GUARD_KEY]
    in_p = [n for n in after if n.pool == "p"]
    open_nodes = [n for n in in_p if n.takes_pods]
    own = sum(1 for n in in_p if isinstance(n.state, Mark))
    foreign = sum(1 for n in in_p if isinstance(n.state, Foreign))
    assert own <= max(0, pool_cap(policy.pools[0], len(open_nodes)) - foreign) or own == 0
    if own:
        assert any(n.state is None for n in open_nodes), "a node that takes pods is always left without the key"
    assert all(not isinstance(n.state, Mark | Orphan) for n in after if n.pool == "q"), "pool q has no guard"
    # made one by one in the order given (the clears first), no moment has more marks than before or the cap
    room = max(0, pool_cap(policy.pools[0], len(open_nodes)) - foreign)
    current = {n.name: n for n in nodes}
    ceiling = max(room, sum(1 for n in nodes if n.pool == "p" and isinstance(n.state, Mark)))
    for change in decision.changes:
        current[change.node] = _after(current[change.node], GuardDecision((change,)))
        assert sum(1 for n in current.values() if n.pool == "p" and isinstance(n.state, Mark)) <= ceiling


@settings(max_examples=200, deadline=None)
@given(cluster_nodes(), st.floats(0.05, 1.0))
def test_every_mark_is_gone_after_its_expiry_once_nothing_renews_it(nodes: list[GuardedNode], fraction: float) -> None:
    """Later, with no node hot or relieved any more (whatever their class otherwise, unknown included), one
    cycle after every expiry leaves no mark of the project anywhere."""
    policy = guard(fraction=fraction)
    after = [_after(n, decide(nodes, policy, ME, NOW)) for n in nodes]
    cooled = [replace(n, node_class=COLD if n.node_class is HOT else n.node_class, relieved=False) for n in after]
    later = NOW + 4000  # beyond every expiry drawn or set (at most NOW + 2000, or NOW + 900)
    final = [_after(n, decide(cooled, policy, ME, later)) for n in cooled]
    assert not any(isinstance(n.state, Mark | Orphan) for n in final)


@settings(max_examples=200, deadline=None)
@given(cluster_nodes(), st.floats(0.0, 1.0))
def test_deciding_again_on_what_was_written_writes_nothing(nodes: list[GuardedNode], fraction: float) -> None:
    """No flapping: the same cycle's facts over the marks just written ask for no further change."""
    policy = guard(fraction=fraction)
    decision = decide(nodes, policy, ME, NOW)
    after = []
    for node in nodes:
        written = _after(node, decision)
        after.append(replace(node, taints=written.taints, annotation=written.annotation))
    assert decide(after, policy, ME, NOW).changes == ()


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(NodeClass)), st.booleans(), MARKS)
def test_cycles_a_minute_apart_write_a_node_only_now_and_then(
    node_class: NodeClass, relieved: bool, mark: Mark | None
) -> None:
    """No flapping over time: a node whose class stays the same (relieved, or not, in the first cycle only)
    is written in at most 3 of 16 cycles a minute apart (the first, and a renewal once half of markTtl has
    gone), whatever mark it started with."""
    node = GuardedNode("n", "p", node_class, relieved, *((mark.taint(),), mark.annotation()) if mark else ())
    writes = 0
    for minute in range(16):
        change = only(decide((node, *FILLER), guard(), ME, NOW + 60 * minute), "n")
        if change is not None:
            writes += 1
            edit = apply_change(change, node.taints, node.annotation)
            assert edit is not None
            node = GuardedNode("n", "p", node_class, False, edit.taints, edit.annotation)
        node = GuardedNode("n", "p", node_class, False, node.taints, node.annotation)
    assert writes <= 3


def test_run_summary_and_json_show_the_guard() -> None:
    from rebalancer.actions.evictor import DryRun, EvictorReport
    from rebalancer.actions.guard.applier import GuardOutcome, GuardReport, GuardResult
    from rebalancer.app.render import run_record, run_summary
    from rebalancer.planning.plan import EvictionPlan

    decision = decide([plain("n", HOT), marked("m", NORMAL, MarkReason.HOT, NOW + 60), *FILLER], guard(), ME, NOW)
    outcomes = (GuardOutcome.APPLIED, GuardOutcome.FAILED)
    report = GuardReport(tuple(GuardResult(c, o, "x") for c, o in zip(decision.changes, outcomes, strict=True)))
    plan = EvictionPlan(NOW, ())
    line = run_summary(plan, EvictorReport(), DryRun.OFF, None, report)
    assert "landing guard: clear m (cooled): applied; set n (hot): failed" in line
    record = run_record(plan, EvictorReport(), "test", None, report)
    assert record["landingGuard"]["changes"] == [
        {"node": "m", "pool": "p", "action": "clear", "reason": "cooled", "expires": None, "outcome": "applied",
         "detail": "x"},
        {"node": "n", "pool": "p", "action": "set", "reason": "hot", "expires": rfc3339(NOW + 900), "outcome": "failed",
         "detail": "x"},
    ]  # fmt: skip
