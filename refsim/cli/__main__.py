import sys

try:
    from refsim.cli import main
    code = main()
except KeyboardInterrupt:           # Ctrl-C while the (tiny) refsim.cli module is imported
    sys.stderr.write("refsim: interrupted (outputs not completed were not written)\n")
    code = 130
sys.exit(code)
