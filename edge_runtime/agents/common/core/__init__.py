"""The synchronous parts every core shares: `node` (`NodeCore`, what every core decides about
publishing and status), `policy` (`PublishPolicy`, `StatusPolicy`, `ConfirmPolicy`,
`EchoTracker`), `reject_log` (`RejectLog`, which rejections to log when) and `reconfigure`
(`classify_config`: which changes of a deployed configuration apply at once).

Core modules do no I/O, read no clock and draw no random numbers of their own: time and
random sources come in as arguments (checked by ``tests/test_layout.py``).
"""
