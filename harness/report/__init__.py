"""The run report: built from a run directory, written as JSON, JUnit, Markdown, SVG and HTML, compared."""
