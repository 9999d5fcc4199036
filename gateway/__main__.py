from gateway.cli import main

# Guarded so that importing every module of the package (tools, import checks) does not run the CLI.
if __name__ == "__main__":
    raise SystemExit(main())
