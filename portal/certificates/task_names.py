"""The certificates app's task names, a contract with messages in flight: never rename them.

A module of their own so that registering the task (every process does, portal/certificates/apps.py)
does not import the issuing services (PDF, signing, cryptography) that send it by this name."""

CERTIFICATE_ISSUE = "kiln.certificate_issue"
