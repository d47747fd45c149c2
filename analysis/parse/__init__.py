"""One parser per raw file kind; each returns typed records and raises ``ParseError`` on bad input."""
