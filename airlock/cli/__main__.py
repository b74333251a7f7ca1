from airlock.cli import main

main()
