"""A space's measurements as a picture and its answers: a PNG and a self-contained HTML page.

    table = space_table(rows)            # table.py: rows -> plot-ready points (pure)
    other = compare(table, space_table(other_rows), "old.csv")   # compare.py (pure, optional)
    files = write_report(table, out_dir, "space-abc", title=..., comparison=other)

write_report asks answers.py (pure) which configuration wins and which tie with it, and
cost.py (pure) what the space cost, has summary.py and cost.py word them once, and hands the
words to figure.py and page.py to lay out. Rows come from ado (sources.py: its API or the
CSV `ado show measurements` writes). matplotlib is imported only in figure.py, when a picture
is drawn, never by the actuator.

A row's loss (loss.py: whether it trained, and the parity of two first-step losses) and what it
ran on (machine.py, from the metadata sources.py reads) are read into each point by table.py;
gate.py says which compared pairs fail `--fail-on`'s checks.
"""
