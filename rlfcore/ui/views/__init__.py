"""The pages of ``rlf ui``, one module per page family: ``runs`` (the list, comparing runs), ``run``
(one run's page and its live parts), ``trajectories`` (a step's samples, one sample, its tokens, its raw
line), ``tools`` (a config's tools and single calls) and ``data`` (preview, validate, launch, stop,
resume).

Each handler is a plain ``async def view(request)`` that reads what the app shares from
``request.app.state.ui`` (:class:`rlfcore.ui.context.UI`); ``rlfcore.ui.app`` routes them.
"""
