import runpy

runpy.run_module("airlock.collective", run_name="__main__", alter_sys=True)
