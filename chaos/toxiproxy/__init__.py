"""A TCP proxy with Toxiproxy's HTTP admin API, on asyncio (DESIGN.md section 10)."""
