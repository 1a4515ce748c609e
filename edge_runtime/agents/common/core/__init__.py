"""The synchronous parts every core shares: `node` (`NodeCore`, what every core decides about
publishing and status), `policy` (`PublishPolicy`, `StatusPolicy`, `ConfirmPolicy`,
`EchoTracker`) and `reject_log` (`RejectLog`, which rejections to log when).

Core modules do no I/O, read no clock and draw no random numbers of their own: time and
random sources come in as arguments (checked by ``tests/test_layout.py``).
"""
