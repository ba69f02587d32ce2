"""LangChain: ``prompt | model | JsonModeParser``, streaming, and the full jsonmode loop.

Run: pip install "langchain-core>=1.7" && python examples/langchain_chain.py

Offline, LangChain's own fake chat models stand in for a provider; swap in any chat
model (``ChatOpenAI(...)``, ``ChatOllama(...)``) and nothing else changes.

1. An LCEL chain whose parser validates (repair mode: repairs) the reply and raises
   ``OutputParserException`` with every error, so LangChain's retry tools can react.
2. The same chain streamed: partial objects while the JSON grows (not yet validated),
   then the validated value.
3. ``jsonmode_runnable``: jsonmode's whole loop as one step, re-asking the model
   with its errors until the answer conforms.
"""

from __future__ import annotations

import textwrap

from langchain_core.exceptions import OutputParserException
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, Field

from jsonmode.adapters.langchain import JsonModeParser, jsonmode_runnable


class Movie(BaseModel):
    title: str
    year: int = Field(ge=1888)
    genres: list[str] = Field(min_length=1)


TEXT = "Spirited Away (2001) is Miyazaki's animated fantasy adventure."
CLEAN = '{"title": "Spirited Away", "year": 2001, "genres": ["animation", "fantasy"]}'
SLOPPY = "```json\n{'title': 'Spirited Away', 'year': '2001', 'genres': ['animation',],}\n```"
NO_GENRES = '{"title": "Spirited Away", "year": 2001, "genres": []}'


def main() -> None:
    parser = JsonModeParser(Movie, mode="repair")
    prompt = ChatPromptTemplate.from_messages(
        [("system", "{format_instructions}"), ("human", "Extract the movie: {text}")]
    ).partial(format_instructions=parser.get_format_instructions())

    print("1. prompt | model | parser")
    chain = prompt | FakeListChatModel(responses=[SLOPPY]) | parser
    print(f"   {chain.invoke({'text': TEXT})!r}")
    strict = prompt | FakeListChatModel(responses=[NO_GENRES]) | JsonModeParser(Movie)
    try:
        strict.invoke({"text": TEXT})
    except OutputParserException as error:
        print("   the strict parser refused it; the observation for the model:")
        print(textwrap.indent(error.observation or "", "     | "))

    print("2. streamed")
    streaming = prompt | GenericFakeChatModel(messages=iter([AIMessage(CLEAN)])) | parser
    for chunk in streaming.stream({"text": TEXT}):
        label = "validated" if isinstance(chunk, Movie) else "partial  "
        print(f"   {label} {chunk!r}")

    print("3. jsonmode's own loop in LCEL (re-asks with the errors)")
    loop = prompt | jsonmode_runnable(FakeListChatModel(responses=[NO_GENRES, CLEAN]), Movie)
    print(f"   {loop.invoke({'text': TEXT})!r}")


if __name__ == "__main__":
    main()
