"""Command-line programs: each module parses its arguments and makes one call into the package.

``scripts/<name>.py`` runs ``asr.cli.<name>.main``; the help text is the module's docstring. Tests
call ``main(argv)`` here instead of loading a script by its path.
"""
