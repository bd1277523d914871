"""Offline trajectory viewer: ``tirl view RUN_DIR`` writes one self-contained HTML page (see :mod:`.render`)."""

from tirl.view.render import render_html, view_records, write_view

__all__ = ["render_html", "view_records", "write_view"]
