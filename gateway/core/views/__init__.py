"""Views: sorted, filtered, searched, counted pages of whole lists (issue 29).

``spec`` validates what a caller asks against the kind's field model, ``evaluate`` answers
it from a snapshot of objects (pure functions), ``cache`` keeps the snapshots, fed by the
watch hub, only while views use them.  Both front ends call :class:`~gateway.core.views.cache.Views`
as they call ``perform`` and ``open_stream``.
"""
