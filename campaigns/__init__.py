"""Bulk campaigns: audience import, paced fan-out into ``email_sends``, pause/resume/cancel.

audience.py   CSV → recipients or rejected lines (pure, streaming)
pacing.py     rate, window, daily cap and warm-up → rows allowed this tick (pure)
store.py      campaigns and their recipients in PostgreSQL (import by COPY, transitions)
pacer.py      the fan-out tick: rows written and checkpoint advanced in one transaction
views.py      status and list, as values and as text
commands.py   the ``mailbus campaign`` command group
"""
