"""The request path: a request sent on one keep-alive client, every network read stamped (client), the stream
parsed after it ended (sse), turned into a record (recording) with the speed formulas on its timeline (timing);
and when an open loop's requests are meant to go out, with the rule that says the client fell behind (arrivals).
"""
