"""One way out for messages (issue #32 item 2): every e-mail through integrations/mail.py with
the site's one settings object, and the violation ladder's webhook through the courier's
Sender (signature, retries, the address guard). A real aiosmtpd and a real HTTP receiver."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.integrations import mail
from jupyter_gpuhive.integrations.delivery import Sender, WebhookSettings
from jupyter_gpuhive.integrations.mail import MailSettings
from jupyter_gpuhive.protection.handlers.base import SAMPLE, HandlerContext
from jupyter_gpuhive.protection.handlers.webhook import WebhookHandler
from jupyter_gpuhive.server.http_transport import TornadoTransport
from tests.integrations.receiver import Receiver, receiving
from tests.protection.conftest import Mailbox

WARSAW = ZoneInfo("Europe/Warsaw")  # the site zone of the test configuration


@pytest.fixture
def hive_config(hive_config: dict[str, Any], smtp_server: Mailbox) -> dict[str, Any]:
    return {
        **hive_config,
        "digest_hour": 7,
        "notify_email": {
            "host": "127.0.0.1",
            "port": smtp_server.port,
            "sender": "gpuhive@example.org",
            "address_template": "{user}@example.org",
        },
        "violation_handlers": {
            "email": {"admins": ["boss@example.org"]},  # no SMTP option: the site's
            "email-own": {
                "type": "email",
                "sender": "ladder@example.org",
                "to_offender": False,
                "admins": ["boss@example.org"],
            },  # its sender wins, the rest: site's
        },
    }


async def test_a_violation_email_and_a_digest_leave_through_one_seam(
    api: Any, jp_serverapp: Any, smtp_server: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    hive = jp_serverapp.web_app.settings["gpuhive"]
    site = hive.integrations.settings.mail
    used: list[MailSettings] = []
    real = mail.send

    def spy(settings: MailSettings, *args: Any) -> None:
        used.append(settings)
        real(settings, *args)

    monkeypatch.setattr(mail, "send", spy)
    handlers = hive.protection.handlers
    assert handlers["email"].smtp is site  # the very object the digests and notices use
    own = handlers["email-own"].smtp
    assert (own.host, own.port, own.sender) == ("127.0.0.1", site.port, "ladder@example.org")

    assert await handlers["email"].handle(SAMPLE, {}) == (
        "e-mailed bob@example.org, boss@example.org"  # the offender by the site's template
    )
    assert (await api("carol")("PUT", "digest", {"enabled": True})).status == 200
    run_at = datetime.combine(datetime.now(WARSAW).date() + timedelta(days=1), time(7, 30),
                              tzinfo=WARSAW)  # fmt: skip
    assert await hive.run(hive.integrations.digests.send_due, run_at) == ["carol"]
    assert await handlers["email-own"].handle(SAMPLE, {}) == "e-mailed boss@example.org"

    assert used[:2] == [site, site] and used[0] is site and used[1] is site
    assert used[2] is own
    got = [(m["from"], m["to"]) for m in smtp_server.messages]
    assert got == [
        ("gpuhive@example.org", ["bob@example.org", "boss@example.org"]),
        ("gpuhive@example.org", ["carol@example.org"]),
        ("ladder@example.org", ["boss@example.org"]),
    ]
    assert "Subject: [gpuhive] foreign use of GPU gpu1:0" in smtp_server.messages[0]["data"]
    assert "Subject: [gpuhive] Your GPUs on" in smtp_server.messages[1]["data"]


def test_without_site_mail_the_handler_keeps_its_own_options() -> None:
    from jupyter_gpuhive.protection.handlers.mail import EmailHandler

    options = {"sender": "h@x", "port": 2525, "to_offender": False, "admins": ["a@x"]}
    handler = EmailHandler("email", options, HandlerContext(mail=MailSettings()))  # no host
    assert (handler.smtp.host, handler.smtp.port, handler.smtp.sender) == ("localhost", 2525, "h@x")
    assert handler.smtp.timeout == 20.0 and handler.smtp.verify


async def test_the_ladders_webhook_is_retried_through_the_courier_seam() -> None:
    with receiving(Receiver(script=[500], secret="ladder-secret")) as hook:
        options = {"url": hook.url, "secret": hook.secret, "backoff": 0.05}
        handler = WebhookHandler("webhook", options, HandlerContext(http=TornadoTransport))
        outcome = await handler.handle(SAMPLE, {})
        assert outcome == f"POST {hook.url}: 200 (attempt 2; 1: HTTP 500)"
        first, second = hook.requests
        assert (first.answered, second.answered) == (500, 200)
        assert first.signed and second.signed and first.event == "violation"
        assert first.key == second.key  # one event: receivers dedupe the retry
        assert len(hook.new_events) == 1


async def test_the_ladders_webhook_gives_up_after_its_attempts() -> None:
    with receiving(Receiver(script=[500, 503], secret="s")) as hook:
        options = {"url": hook.url, "secret": "s", "attempts": 2, "backoff": 0.05}
        handler = WebhookHandler("webhook", options, HandlerContext(http=TornadoTransport))
        with pytest.raises(Exception, match=r"HTTP 503 \(after 2 attempts; 1: HTTP 500\)"):
            await handler.handle(SAMPLE, {})
        assert [r.answered for r in hook.requests] == [500, 503]


async def test_only_a_site_destination_may_point_inside() -> None:
    """The admin's handler (site=True) reaches loopback; a user's destination would not."""
    with receiving(Receiver(secret="s")) as hook:
        how = {"event": "violation", "event_id": "e-1", "secret": "s"}
        user = Sender(WebhookSettings(timeout=3.0), TornadoTransport, site=False)
        try:
            refused = await user.post(hook.url, b"{}", **how)
        finally:
            user.close()
        assert refused.status is None and refused.error is not None
        assert refused.error.startswith("not sent: 127.0.0.1 is a loopback")
        assert hook.requests == []
        site = Sender(WebhookSettings(timeout=3.0), TornadoTransport, site=True)
        try:
            assert (await site.post(hook.url, b"{}", **how)).status == 200
        finally:
            site.close()
