"""RAG with citations that cannot be made up: the allowed ids are built per request.

Run: python examples/rag_citations.py

Retrieval returns a few documents; the answer schema is built for *this* request,
with ``citations`` restricted to an enum of exactly the ids that were retrieved. A
model that cites anything else (a document it remembers, a plausible-looking id)
produces a schema violation, never a silently wrong reference: strict mode re-asks
with the allowed ids spelled out, and the constrained tier (a local model) cannot
even emit another id.
"""

from __future__ import annotations

import re
from typing import Literal

from _offline import backend, is_reask, show_attempts
from pydantic import BaseModel, Field, create_model

import jsonmode
from jsonmode import Request

CORPUS = {
    "kb-101": "Refunds are issued within 14 days of receiving the returned item.",
    "kb-102": "Items must be returned unused and in their original packaging.",
    "kb-205": "Express shipping costs CHF 15 and arrives in 1-2 business days.",
    "kb-310": "Gift cards cannot be refunded or exchanged for cash.",
    "kb-311": "Store credit from a return never expires.",
}


def retrieve(question: str, k: int = 3) -> dict[str, str]:
    """Keyword-overlap retrieval: enough to show the idea, no index needed."""
    words = set(re.findall(r"[a-z]+", question.lower()))

    def score(doc_id: str) -> int:
        return len(words & set(re.findall(r"[a-z]+", CORPUS[doc_id].lower())))

    best = sorted(CORPUS, key=score, reverse=True)[:k]
    return {doc_id: CORPUS[doc_id] for doc_id in best}


def answer_model(doc_ids: list[str]) -> type[BaseModel]:
    """The answer schema for one request: citations are an enum of the retrieved ids."""
    cited = Literal[tuple(doc_ids)]  # type: ignore[valid-type]
    return create_model(
        "CitedAnswer",
        answer=(str, Field(description="Answer only from the documents.")),
        citations=(list[cited], Field(min_length=1, description="ids of the documents used")),
    )


def scripted(request: Request) -> str:
    if is_reask(request):
        return (
            '{"answer": "Returned items are refunded within 14 days if unused and in '
            'their original packaging.", "citations": ["kb-101", "kb-102"]}'
        )
    # The classic failure: a confident citation of a document that was not retrieved.
    return '{"answer": "Refunds take 14 days.", "citations": ["kb-101", "kb-099"]}'


def main() -> None:
    model = backend([scripted, scripted], "Answer with citations constrained to retrieved ids.")
    jm = jsonmode.JsonMode(model, mode="strict")

    question = "How long do refunds take, and what condition must returned items be in?"
    documents = retrieve(question)
    print(f"question: {question}")
    print(f"retrieved: {', '.join(documents)}")
    context = "\n".join(f"[{doc_id}] {text}" for doc_id, text in documents.items())

    result = jm.run(f"Documents:\n{context}\n\nQuestion: {question}", answer_model(list(documents)))

    print(f"answer: {result.value.answer}")
    for doc_id in result.value.citations:
        assert doc_id in documents  # guaranteed by the schema, not by hope
        print(f"  [{doc_id}] {documents[doc_id]}")
    show_attempts(result.attempts)


if __name__ == "__main__":
    main()
