"""The events a session's summary accounts for: the writer notes writing one, the reader looks for them.

A module of its own, so that the reader need not import the writer for it: the writer imports the reader
(when it takes over a file), never the other way round.
"""

NOTABLE = ("runner-start", "finding", "crash")
