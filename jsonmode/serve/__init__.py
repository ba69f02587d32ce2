"""``jsonmode serve``: an OpenAI-compatible endpoint that returns conforming JSON.

An optional extra (``pip install "jsonmode[serve]"``: Starlette and uvicorn);
``import jsonmode`` never imports this package. The pieces:

    config.py     ServeConfig, the server's settings (and how workers get them)
    wire.py       a request's JSON → a checked Call (400s with the JSON path)
    upstream.py   the model behind: structured calls through JsonMode, the rest proxied
    deferred.py   the ASGI answer: cancelled on disconnect; streams never take back
    chat.py       /v1/chat/completions
    tools.py      chat completions with strict function tools: calls checked, repaired, re-asked
    responses.py  /v1/responses (the Responses API), over the same tiers
    responses_wire.py  a Responses body → a chat body (400s naming the Responses field)
    errors.py     errors as OpenAI-shaped HTTP answers (422 jsonmode_nonconforming ...)
    auth.py       the bearer key
    app.py        the Starlette app
    httpmetrics.py  the server's own metric families (requests by route and status, in flight)
    runner.py     uvicorn: workers, SIGTERM drain
"""
