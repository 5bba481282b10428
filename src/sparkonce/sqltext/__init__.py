"""Spark SQL text: the lexer (:mod:`.lexer`) and the grammar every statement shares (:mod:`.grammar`)."""
