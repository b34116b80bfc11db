"""``python -m harness.campaign``: the campaign's command line (``harness.campaign.cli.main``)."""

from harness.campaign.cli import main

if __name__ == "__main__":
    main()
