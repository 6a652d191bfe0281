"""A space's measurements as a picture: a PNG and a self-contained HTML page.

    table = space_table(rows)            # table.py: rows -> plot-ready points (pure)
    files = write_report(table, out_dir, "space-abc", title=...)

Rows come from ado (sources.py: its API or the CSV `ado show measurements` writes). matplotlib
is imported only when a picture is drawn, never by the actuator.
"""
