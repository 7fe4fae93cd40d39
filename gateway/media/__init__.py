"""Images in tool results (SPEC 6): checked, stored once by SHA-256, served back.

    formats.py      what kind of image some bytes are, by structure (PNG, JPEG, GIF, WebP)
    validation.py   the rules: canonical base64, size, type, count, uri length
    references.py   the reference and the gateway media uri (dex-gateway://media/sha256/<hash>)
    store_urls.py   `media.store` URLs: file://, s3://, memory://
    stores/         local directory, S3-compatible (aioboto3), in-memory (tests)
    grants.py       which principal an image reached (the gateway's database)
    stage.py        the stage of the tools/call tail: answer in, answer out
    serving.py      GET /media/sha256/<hash> and resources/read of a media uri
    runtime.py      what the app's lifespan opens and closes

Nothing is imported here, so the config can parse a store URL without loading a store.
"""
