"""A run folder's files, read by every side that meets them: the local and verl backends that write
them and the UI that shows them. Plain reading code at the bottom of the import graph, so a backend
never imports another backend or the UI to read a run."""
