"""The async API: several sandboxes at once from one event loop."""

import asyncio

from stockade import AsyncStockade


async def run_code(client: AsyncStockade, code: str) -> str:
    async with (await client.create()) as sandbox:
        result = await sandbox.exec(["python3", "-c", code])
        return result.stdout


async def main() -> None:
    client = AsyncStockade()
    outs = await asyncio.gather(*(run_code(client, f"print({i} ** 2)") for i in range(5)))
    print(" ".join(o.strip() for o in outs))


asyncio.run(main())
