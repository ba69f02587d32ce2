"""Rule shapes (jsonmode.decoding.automata.shapes): the key structural automata are cached by."""

from __future__ import annotations

from jsonmode.decoding.automata.shapes import dead_parts, shape_of
from jsonmode.decoding.ir import EMPTY, Alt, Call, Lit, Members, Rep, Seq

SEP = Seq((Lit(b","), Rep(Lit(b" "), 0, 1)))


def _array(item: str) -> Seq:
    return Seq(
        (
            Lit(b"["),
            Alt((EMPTY, Seq((Call(item), Rep(Seq((SEP, Call(item))), 0, None))))),
            Lit(b"]"),
        )
    )


def test_rules_that_differ_in_their_callees_names_only_share_a_shape():
    strings, numbers = shape_of(_array("string")), shape_of(_array("number_2"))
    assert strings == numbers
    assert hash(strings) == hash(numbers)
    assert strings.callees == ("string",)
    assert numbers.callees == ("number_2",)
    assert strings.key == shape_of(_array("0")).key  # (callees spelled by number)
    assert strings.structural
    assert not strings.families


def test_callees_are_numbered_by_first_call():
    one = shape_of(Seq((Call("a"), Call("b"), Call("a"))))
    two = shape_of(Seq((Call("x"), Call("y"), Call("x"))))
    three = shape_of(Seq((Call("x"), Call("y"), Call("y"))))
    assert one == two != three
    assert one.callees == ("a", "b")


def test_spellings_are_unambiguous():
    """Expressions that differ get different keys, however their parts print."""
    forms = [
        Lit(b"ab"),
        Seq((Lit(b"a"), Lit(b"b"))),
        Alt((Lit(b"a"), Lit(b"b"))),
        Lit(b"\\xff"),
        Lit(b"\xff"),
        Lit(b"a'b"),
        Lit(b'a"b'),
        Rep(Lit(b"a"), 0, None),
        Rep(Lit(b"a"), 0, 1),
        Rep(Seq((Lit(b"a"), Lit(b"b"))), 0, 1),
        Seq((Rep(Lit(b"a"), 0, 1), Lit(b"b"))),
        Members(((Lit(b"a"), True),), None, Lit(b",")),
        Members(((Lit(b"a"), False),), None, Lit(b",")),
        Members(((Lit(b"a"), True),), Call("x"), Lit(b",")),
        Members(((Lit(b"a"), True),), None, Lit(b","), any_order=True),
        Members(((Lit(b"a"), True), (Lit(b"b"), True)), None, Lit(b",")),
        Members(((Seq((Lit(b"a"), Lit(b"b"))), True),), None, Lit(b",")),
        EMPTY,
        Alt(()),
        Call("a"),
        Seq((Call("a"), Call("b"))),
        Seq((Call("a"), Call("a"))),
    ]
    keys = [shape_of(form).key for form in forms]
    assert len(set(keys)) == len(keys), keys


def test_lexemes_are_not_structural_and_big_any_order_objects_have_families():
    assert not shape_of(Seq((Lit(b'"'), Lit(b"x"), Lit(b'"')))).structural
    assert shape_of(Members((), None, Lit(b","))).structural  # (an object, even without calls)
    members = tuple((Lit(b"k%d" % i), False) for i in range(9))
    assert shape_of(Members(members, None, Lit(b","), any_order=True)).families
    assert not shape_of(Members(members, None, Lit(b","))).families


def test_dead_parts():
    assert dead_parts(Seq((Lit(b"a"), Alt(()))))
    assert dead_parts(Members(((Alt(()), False),), None, Lit(b",")))
    assert not dead_parts(Seq((Lit(b"a"), Call("never_mind"), Rep(Lit(b"b"), 0, None))))


def test_a_shape_is_remembered_for_its_expression_object_only(monkeypatch):
    """The same expression object takes its shape from the memo (no second spelling);
    an equal expression built apart is spelled for itself, with its own callees, and
    gets an equal shape; a memo entry is served to its own object only."""
    from jsonmode.decoding.automata import shapes as shapes_module

    spelled: list[object] = []
    spell = shapes_module._Walk.spell

    def counting(self, expr):  # type: ignore[no-untyped-def]
        spelled.append(expr)
        spell(self, expr)

    monkeypatch.setattr(shapes_module._Walk, "spell", counting)
    first = _array("item_9")
    shape = shape_of(first)
    assert shape.source is first
    count = len(spelled)
    assert count > 0
    assert shape_of(first) is shape
    assert len(spelled) == count  # (not spelled again)
    again = _array("item_9")
    other = shape_of(again)
    assert len(spelled) > count
    assert other is not shape
    assert other == shape
    assert other.source is again
    renamed = shape_of(_array("item_10"))
    assert renamed == shape
    assert renamed.callees == ("item_10",)
    # (An entry left under a number that a newcomer now has is not served to it.)
    newcomer = _array("item_11")
    shapes_module._recent.put(id(newcomer), shape, 1)
    served = shape_of(newcomer)
    assert served is not shape
    assert served.source is newcomer
    assert served.callees == ("item_11",)
