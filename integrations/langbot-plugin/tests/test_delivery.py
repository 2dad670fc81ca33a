"""A run's results on their way to the chat: where LangBot delivers them
(a Pipeline binding) and where the runner replies itself (an Agent one)."""

import asyncio
from types import SimpleNamespace

from components.runner.delivery import REPLY_TOOL, Delivery
from components.runner.outbox import Outbox


class Ctx:
    """The parts of a RunnerContext delivery reads, replies recorded."""

    def __init__(self, automatic, limit=None, tool=True):
        self.delivery = SimpleNamespace(automatic_reply=automatic, max_message_size=limit, interactions=None)
        tools = [SimpleNamespace(tool_name=REPLY_TOOL, operations=["call"])] if tool else []
        self.resources = SimpleNamespace(tools=tools)
        self.context = SimpleNamespace(available_apis=SimpleNamespace(reply_stream=False))
        self.replies = []

    async def reply(self, message):
        self.replies.append(message)


def shape(ctx, results, outbox=None):
    async def source():
        for result in results:
            yield result

    async def collect():
        return [r async for r in Delivery(ctx, "Codex", outbox).shape(source())]

    return asyncio.run(collect())


def message(text, **meta):
    data = {"message": {"role": "assistant", "content": text, **({"metadata": meta} if meta else {})}}
    return {"run_id": "r1", "type": "message.completed", "data": data}


def completed(final=None):
    data = {"message": final} if final is not None else {}
    return {"run_id": "r1", "type": "run.completed", "data": data}


def failed(error, retryable=False):
    return {"run_id": "r1", "type": "run.failed", "data": {"error": error, "code": "harness_error",
                                                           "retryable": retryable}}


def test_where_langbot_delivers_the_final_message_carries_the_runs_metadata_once():
    final = {"role": "assistant", "content": "done", "metadata": {"session": {"id": "s"}}}
    out = shape(Ctx(automatic=True), [message("done"), completed(final)])
    assert [r["type"] for r in out] == ["message.completed", "run.completed"]
    assert out[0]["data"]["message"] == final
    assert "message" not in out[1]["data"]


def test_an_earlier_message_is_not_the_final_one():
    out = shape(Ctx(automatic=True), [message("first"), message("second"), completed()])
    assert [message["data"]["message"]["content"] for message in out[:2]] == ["first", "second"]
    assert out[2]["type"] == "run.completed"


def test_where_the_runner_replies_the_reply_is_sent_once_split_to_the_surface():
    ctx = Ctx(automatic=False, limit=12)
    out = shape(ctx, [message("one two three four"), completed()])
    assert ctx.replies == ["one two", "three four"]
    assert [r["type"] for r in out] == ["message.completed", "run.completed"]


def test_a_failure_reaches_the_person_as_a_sentence():
    ctx = Ctx(automatic=False)
    out = shape(ctx, [failed("model overloaded\ntrace", retryable=True)])
    assert ctx.replies == ["Codex could not answer: model overloaded Try again in a moment."]
    assert out[-1]["type"] == "run.failed"


def test_without_the_reply_tool_the_record_says_why_nothing_was_sent():
    ctx = Ctx(automatic=False, tool=False)
    out = shape(ctx, [message("hi"), completed()])
    assert ctx.replies == []
    warning = [r for r in out if r["type"] == "processor.log"]
    assert len(warning) == 1
    assert "does not reach the chat" in warning[0]["data"]["text"]


def test_a_question_ends_the_delivered_message_as_text_where_no_card_is_drawn():
    ask = {"run_id": "r1", "type": "action.requested",
           "data": {"action": "interaction.requested", "payload": {"fallback_text": "Approve? Reply yes or no."}}}
    out = shape(Ctx(automatic=True), [message("I need to run a command."), ask, completed()])
    assert out[0]["data"]["message"]["content"] == "I need to run a command.\n\nApprove? Reply yes or no."
    assert [r["type"] for r in out] == ["message.completed", "run.completed"]


def test_an_outbox_image_rides_in_the_delivered_message():
    import base64

    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 8
    outbox = Outbox(10_000, 10_000)
    artifact = {"run_id": "r1", "type": "artifact.created",
                "data": {"name": "chart.png", "content_base64": base64.b64encode(png).decode(), "size_bytes": len(png)}}
    out = shape(Ctx(automatic=True), [artifact, message("Here it is."), completed()], outbox)
    assert out[0]["type"] == "processor.log"  # the artifact itself is only recorded
    parts = out[1]["data"]["message"]["content"]
    assert parts[0] == {"type": "text", "text": "Here it is."}
    assert parts[1]["image_base64"].startswith("data:image/png;base64,")


def test_the_projects_summary_follows_the_reply_where_the_runner_replies():
    ctx = Ctx(automatic=False)
    summary = "Changes on branch `chat/c1`: 1 file changed, +1 −0."
    out = shape(ctx, [message("Edited."), message(summary, project={"branch": "chat/c1"}), completed()])
    assert ctx.replies == ["Edited.", summary]
    assert [r["type"] for r in out] == ["message.completed", "run.completed"]


def test_the_projects_summary_ends_the_delivered_message():
    summary = "Changes on branch `chat/c1`: 1 file changed, +1 −0."
    final = {"role": "assistant", "content": "Edited.", "metadata": {"session": {"id": "s"}}}
    out = shape(Ctx(automatic=True), [message("Edited."), message(summary, project={"branch": "chat/c1"}),
                                      completed(final)])
    assert [r["type"] for r in out] == ["message.completed", "run.completed"]
    assert out[0]["data"]["message"]["content"] == f"Edited.\n\n{summary}"


def test_a_turn_the_person_stopped_ends_with_the_bridges_answer_not_a_failure():
    stopped = {"run_id": "r1", "type": "run.failed",
               "data": {"error": "the run was cancelled", "code": "cancelled", "retryable": False}}
    answer = message("Stopped the running turn (it ran for 3 s).", command="stop")
    out = shape(Ctx(automatic=True), [message("half an answer"), answer, stopped])
    assert [r["type"] for r in out] == ["message.completed", "message.completed", "run.completed"]
    assert out[1]["data"]["message"]["content"].startswith("Stopped the running turn")
    assert out[2]["data"]["finish_reason"] == "cancelled"
    ctx = Ctx(automatic=False)
    shape(ctx, [answer, stopped])
    assert [r for r in ctx.replies] == ["Stopped the running turn (it ran for 3 s)."]
    # A cancel nobody asked for in the chat stays a failure.
    out = shape(Ctx(automatic=True), [message("half an answer"), stopped])
    assert out[-1]["type"] == "run.failed"
    # The turn's own words still on their way after the answer come before
    # it: the answer is the last word.
    out = shape(Ctx(automatic=True), [answer, message("half an answer"), stopped])
    assert [r["type"] for r in out] == ["message.completed", "message.completed", "run.completed"]
    assert out[0]["data"]["message"]["content"] == "half an answer"
    assert out[1]["data"]["message"]["content"].startswith("Stopped the running turn")
    # A refused /stop is an answer like any other.
    refused = message("Only people who have had a turn here may use /stop here.", command="stop", refused=True)
    out = shape(Ctx(automatic=True), [refused, message("done"), completed()])
    assert [m["data"]["message"]["content"] for m in out if m["type"] == "message.completed"][0].startswith("Only")


def test_an_answer_to_a_command_sent_while_the_turn_works_is_given_at_once():
    status = message("Running: a turn of codex for 3 s.", command="status", in_turn=True)
    out = shape(Ctx(automatic=True), [message("half"), status, message("done"), completed()])
    kinds = [(r["type"], (r["data"].get("message") or {}).get("content")) for r in out]
    # Given before the words held back (they may be the turn's last).
    assert kinds[:2] == [("message.completed", "Running: a turn of codex for 3 s."), ("message.completed", "half")]
    assert kinds[-1][0] == "run.completed"


def turns(ctx, *turns):
    """What a run of several turns yields (each a list of results, a
    follow-up's turn after the one before), as the runner relays it."""
    delivery = Delivery(ctx, "Claude Code")

    async def source():
        for n, results in enumerate(turns):
            if n:
                delivery.turn_over()
            for result in results:
                yield result

    async def collect():
        return [r async for r in delivery.shape(source())]

    return asyncio.run(collect())


def test_where_langbot_delivers_the_runs_last_message_carries_each_turns_answer():
    # A Pipeline binding: over a surface that does not stream (OneBot v11)
    # LangBot sends the run's last message alone.
    status = message("Running: a turn of claude for 3 s.", command="status", in_turn=True)
    out = turns(Ctx(automatic=True), [message("Let me look."), status, message("First answer.")],
                [message("Second answer."), completed()])
    said = [r["data"]["message"]["content"] for r in out if r["type"] == "message.completed"]
    # The command's answer at once; the first turn's answer only in the
    # last message (never twice where each message is shown).
    assert said == ["Running: a turn of claude for 3 s.", "Let me look.",
                    "Running: a turn of claude for 3 s.\n\nFirst answer.\n\nSecond answer."]
    assert out[-1]["type"] == "run.completed"
    # A /stop in the follow-up's turn: its answer is the last word, after
    # the first turn's.
    stopped = {"run_id": "r1", "type": "run.failed",
               "data": {"error": "the run was cancelled", "code": "cancelled", "retryable": False}}
    answer = message("Stopped the running turn (it ran for 3 s).", command="stop")
    out = turns(Ctx(automatic=True), [message("First answer.")], [message("half"), answer, stopped])
    said = [r["data"]["message"]["content"] for r in out if r["type"] == "message.completed"]
    assert said[-1] == "First answer.\n\nStopped the running turn (it ran for 3 s)."
    assert out[-1]["data"]["finish_reason"] == "cancelled"
    # A single turn is as it was: its last message alone.
    out = turns(Ctx(automatic=True), [message("Only answer."), completed()])
    assert [r["data"]["message"]["content"] for r in out if r["type"] == "message.completed"] == ["Only answer."]


def test_where_the_runner_replies_the_reply_at_the_end_carries_each_turns_answer():
    # An Agent binding takes no follow-ups into a run; were a run to hold
    # two turns, the reply sent at its end would carry both answers.
    ctx = Ctx(automatic=False)
    turns(ctx, [message("First answer.")], [message("Second answer."), completed()])
    assert ctx.replies == ["First answer.\n\nSecond answer."]


def test_a_cancelled_turn_is_told_as_stopped_not_as_the_harness_failing():
    ctx = Ctx(automatic=False)
    cancelled = {"run_id": "r1", "type": "run.failed",
                 "data": {"error": "the run was cancelled; Codex stopped the turn and keeps the session",
                          "code": "cancelled", "retryable": False}}
    out = shape(ctx, [message("half"), cancelled])
    assert ctx.replies == ["Codex stopped before it finished: the turn was cancelled."]
    assert out[-1]["type"] == "run.failed"


def test_a_turn_that_fails_after_one_that_answered_loses_no_answer():
    out = turns(Ctx(automatic=True), [message("First answer.")], [message("half"), failed("boom")])
    kinds = [(r["type"], (r["data"].get("message") or {}).get("content")) for r in out]
    assert kinds == [("message.completed", "First answer."), ("message.completed", "half"), ("run.failed", None)]
    ctx = Ctx(automatic=False)
    turns(ctx, [message("First answer.")], [message("half"), failed("boom")])
    assert ctx.replies == ["First answer.\n\nClaude Code could not answer: boom"]


def test_a_turns_last_words_followed_by_a_commands_answer_stay_its_answer():
    # `/status` answered between a turn's last message and its end: the
    # turn's words still end up in the run's last message.
    status = message("Running: a turn of claude for 3 s.", command="status", in_turn=True)
    out = turns(Ctx(automatic=True), [message("First answer."), status], [message("Second answer."), completed()])
    said = [r["data"]["message"]["content"] for r in out if r["type"] == "message.completed"]
    assert said == ["Running: a turn of claude for 3 s.",
                    "Running: a turn of claude for 3 s.\n\nFirst answer.\n\nSecond answer."]


def waiting_card(text):
    payload = {"interaction_id": "egress-1", "kind": "confirmation", "title": "Claude Code wants to reach x.org:443",
               "actions": [{"id": "allow", "label": "Allow once", "style": "primary"}], "fallback_text": text}
    return {"run_id": "r1", "type": "action.requested", "in_turn": True,
            "data": {"action": "interaction.requested", "payload": payload}}


def test_a_question_the_turn_waits_on_is_shown_at_once_where_langbot_delivers():
    card = waiting_card("Claude Code wants to reach x.org:443. Reply /allow.")
    out = shape(Ctx(automatic=True), [message("half"), card, message("done"), completed()])
    said = [(r["data"].get("message") or {}).get("content") for r in out if r["type"] == "message.completed"]
    # Before the words held back, and again in the run's last message
    # (all some surfaces show).
    assert said[0] == "Claude Code wants to reach x.org:443. Reply /allow."
    assert "Reply /allow." in said[-1] and said[-1].endswith("done")
    assert not any(r["type"] == "action.requested" for r in out)


def test_a_question_the_turn_waits_on_is_sent_at_once_where_the_runner_replies():
    ctx = Ctx(automatic=False)
    card = waiting_card("Claude Code wants to reach x.org:443. Reply /allow.")

    async def source():
        yield message("half")
        yield card
        # The runner has sent it before the turn goes on.
        assert ctx.replies == ["Claude Code wants to reach x.org:443. Reply /allow."]
        yield message("done")
        yield completed()

    async def collect():
        return [r async for r in Delivery(ctx, "Claude Code").shape(source())]

    asyncio.run(collect())
    assert ctx.replies == ["Claude Code wants to reach x.org:443. Reply /allow.", "done"]


def test_a_card_the_turn_waits_on_is_yielded_at_once_without_the_bridges_mark():
    ctx = Ctx(automatic=True)
    ctx.delivery.interactions = SimpleNamespace()
    card = waiting_card("Reply /allow.")
    out = shape(ctx, [message("half"), card, message("done"), completed()])
    assert out[0]["type"] == "action.requested"
    assert "in_turn" not in out[0]
