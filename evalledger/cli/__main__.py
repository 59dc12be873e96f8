from evalledger.cli import main

main()
