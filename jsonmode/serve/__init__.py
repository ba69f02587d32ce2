"""``jsonmode serve``: an OpenAI-compatible endpoint that returns conforming JSON.

An optional extra (``pip install "jsonmode[serve]"``: Starlette and uvicorn);
``import jsonmode`` never imports this package. The pieces:

    config.py     ServeConfig, the server's settings (and how workers get them)
    wire.py       a request's JSON → a checked Call (400s with the JSON path)
    upstream.py   the model behind: structured calls through JsonMode, the rest proxied
    deferred.py   the ASGI answer: cancelled on disconnect; streams never take back
    chat.py       /v1/chat/completions
    errors.py     errors as OpenAI-shaped HTTP answers (422 jsonmode_nonconforming ...)
    auth.py       the bearer key
    app.py        the Starlette app
    runner.py     uvicorn: workers, SIGTERM drain
"""
