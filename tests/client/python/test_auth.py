"""Call metadata without a server: the pairs' checks and the call_metadata() blocks."""
import asyncio
import threading
import unittest

from matserve_client import auth, call_metadata


class CallMetadataTest(unittest.TestCase):
    def test_pairs_are_checked(self):
        self.assertEqual(auth.check_pairs([("x-request-id", "42")], "m"), (("x-request-id", "42"),))
        for bad in [("X-Upper", "v"), ("has space", "v"), ("data-bin", "v"), ("k", 3), ("k",)]:
            with self.assertRaises(ValueError):
                auth.check_pairs([bad], "metadata")
        self.assertEqual(auth.bearer("t0k"), ("authorization", "Bearer t0k"))
        with self.assertRaises(ValueError):
            auth.bearer("")

    def test_blocks_nest_and_end(self):
        self.assertEqual(auth.current_call_metadata(), ())
        with call_metadata(("a", "1")):
            with call_metadata(("b", "2"), ("c", "3")):
                self.assertEqual(auth.current_call_metadata(), (("a", "1"), ("b", "2"), ("c", "3")))
            self.assertEqual(auth.current_call_metadata(), (("a", "1"),))
        self.assertEqual(auth.current_call_metadata(), ())
        with self.assertRaises(ValueError):
            with call_metadata(("Bad", "x")):
                pass

    def test_other_threads_and_tasks_do_not_see_a_block(self):
        seen = []
        with call_metadata(("a", "1")):
            t = threading.Thread(target=lambda: seen.append(auth.current_call_metadata()))
            t.start()
            t.join()
        self.assertEqual(seen, [()])

        async def main():
            async def other():
                await asyncio.sleep(0.01)
                return auth.current_call_metadata()
            task = asyncio.ensure_future(other())  # created outside the block
            with call_metadata(("x", "1")):
                inside = auth.current_call_metadata()
                await asyncio.sleep(0.02)
            return inside, await task
        self.assertEqual(asyncio.run(main()), ((("x", "1"),), ()))


if __name__ == "__main__":
    unittest.main()
