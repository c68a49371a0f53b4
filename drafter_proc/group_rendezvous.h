// How the members of an NCCL drafter group find the group's id, and learn that the group
// broke beyond what they can see themselves. Two ways:
//  - one machine: the ring header (shm/nccl_rendezvous.h); the leader's incarnation is
//    known from the ring's process table, so the id of a restarted leader is never used;
//  - several machines: files in a shared folder (group_files.h), in generations.
// Members on the same machine also watch each other through the ring (nccl_group.cc); this
// is for what the ring cannot show.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "drafter_proc/grad_exchange.h"
#include "drafter_proc/group_files.h"

namespace hsring {

class Ring;

class GroupRendezvous {
 public:
  virtual ~GroupRendezvous() = default;

  // The leader (rank 0): makes `id` the group's.
  virtual void publish(const GroupId& id) = 0;
  // A member: the id to join once the leader's live incarnation published one; nullopt
  // meanwhile (waiting_for() says what for).
  virtual std::optional<GroupId> poll() = 0;
  virtual std::string waiting_for() const = 0;
  // While the group forms and runs: "" while it stands as far as this rendezvous sees,
  // else why it ended.
  virtual std::string ended() = 0;
  // This member leaves a group that broke for it: members that only see the group
  // through this rendezvous learn it.
  virtual void leave() = 0;
  // This member's machine stops its run (a drain) / another machine's did: members that
  // only see the group through this rendezvous stop too. On one machine every member sees
  // the drain itself.
  virtual void stop() = 0;
  virtual bool stopped() = 0;
  // For the log: "the ring" / "files in DIR".
  virtual std::string describe() const = 0;
};

// On one machine: member `rank` (incarnation `epoch`) of the drafters on `ring`, whose
// drafter 0 `peers` reports.
std::unique_ptr<GroupRendezvous> ring_rendezvous(Ring& ring, uint32_t rank, uint32_t epoch,
                                                 PeerWatch peers);

// Across machines: member `rank` of `members` through the files in `dir`. Throws Error
// when the folder cannot be made.
std::unique_ptr<GroupRendezvous> file_rendezvous(const std::string& dir, uint32_t members,
                                                 uint32_t rank);

}  // namespace hsring
