"""The study's report, one room per concern.

- `formats`: names and numbers as the reader sees them;
- `verdict`: the sentences of the verdict, chosen by the analysis's numbers;
- `palette`: each method's colour, line style and marker, the same in every figure (DVC's plots included);
- `plotting`: what every figure shares (sizes legible on a phone, small multiples, bands, legends, saving);
- `figures`, `tuning_figures`: the figures of training and final runs, and of what a search buys;
- `sections`, `reproduction`: the report's sections;
- `document`: sections rendered to Markdown and to one HTML page that links its figures, through templates;
- `writer`: everything written to disk, metrics.json included.

Everything is drawn from a `StudyAnalysis` (study.analysis); nothing is computed twice.
"""

from study.report.document import Bullets, FigureRef, Section, Table, render_html, render_markdown
from study.report.formats import loss_name, method_name, metric_name, trials_interval
from study.report.palette import method_style, method_styles
from study.report.plotting import new_figure, plain_log_ticks, readable, save_figure
from study.report.verdict import verdict, verdict_sentences
from study.report.writer import UnwritableReportFolder, check_writable, metrics_summary, write_report

__all__ = ["Bullets", "FigureRef", "Section", "Table", "UnwritableReportFolder", "check_writable", "loss_name",
           "method_name", "method_style", "method_styles", "metric_name", "metrics_summary", "new_figure",
           "plain_log_ticks", "readable", "render_html", "render_markdown", "save_figure", "trials_interval", "verdict",
           "verdict_sentences", "write_report"]
