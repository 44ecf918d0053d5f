"""The operator console at /ui: the summary and history documents, the page's assets and their serving."""
